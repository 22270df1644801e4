-- Verify mailroom:unsubscribe on pg

BEGIN;

SELECT 1/has_function_privilege('mailroom_unsubscribe', 'mailroom.unsubscribe(text, text, bigint, text)', 'execute')::int;
SELECT 1/(NOT has_function_privilege('mailroom_unsubscribe', 'mailroom.suppress(text, text, text, text)', 'execute'))::int;

ROLLBACK;
