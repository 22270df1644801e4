-- Tests for mailroom:table_suppressions
BEGIN;
SELECT plan(7);

SELECT has_table('mailroom', 'suppressions', 'suppressions table exists');
-- since streams: one row per normalised address and scope (stream, NULL = all streams)
SELECT col_is_unique('mailroom', 'suppressions', ARRAY['address_key', 'stream'], 'keyed by the normalised address and its stream scope');
SELECT is(mailroom._address_key('Ann.Lee@Example.COM'), 'Ann.Lee@example.com', 'only the domain is folded');
SELECT is(mailroom._address_key(NULL), NULL, 'NULL stays NULL');
SELECT throws_ok($$INSERT INTO mailroom.suppressions (address_key, address, reason) VALUES ('a@x.com', 'a@x.com', 'because')$$,
  '23514', NULL, 'reason must be one of the known reasons');
SELECT throws_ok($$INSERT INTO mailroom.suppressions (address_key, address, reason) VALUES ('a@X.com', 'a@X.com', 'manual')$$,
  '23514', NULL, 'address_key must be the normalised address');
SELECT function_privs_are('mailroom', '_address_key', ARRAY['text'], 'mailroom_app', ARRAY[]::text[],
  'internal helper is not callable by apps');

SELECT * FROM finish();
ROLLBACK;
