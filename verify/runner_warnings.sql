-- Verify mailroom:runner_warnings on pg

BEGIN;

SELECT 1/has_function_privilege('mailroom_operator', 'mailroom.runner_warnings()', 'execute')::integer;
SELECT warning, messages, oldest_age, detail FROM mailroom.runner_warnings() WHERE false;

ROLLBACK;
