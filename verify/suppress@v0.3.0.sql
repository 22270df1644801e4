-- Verify mailroom:suppress on pg

BEGIN;

SELECT has_function_privilege('mailroom_app', 'mailroom.suppress(text, text, text, timestamptz)', 'execute');
SELECT has_function_privilege('mailroom_app', 'mailroom.unsuppress(text)', 'execute');

ROLLBACK;
