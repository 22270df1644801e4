-- Tests for mailroom:schema
BEGIN;
SELECT plan(3);

SELECT has_schema('mailroom', 'schema mailroom exists');
SELECT schema_owner_is('mailroom', 'mailroom_owner', 'the owner role owns the schema');
SELECT ok(NOT has_schema_privilege('public', 'mailroom', 'create'), 'PUBLIC cannot create objects in mailroom');

SELECT * FROM finish();
ROLLBACK;
