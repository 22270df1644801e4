-- Verify mailroom:runner_waiting on pg

BEGIN;

SELECT 1/has_function_privilege('mailroom_runner', 'mailroom.runner_waiting(boolean)', 'execute')::integer;
SELECT 1/has_function_privilege('mailroom_runner', 'mailroom.enqueues_settled()', 'execute')::integer;
SELECT pid, since FROM mailroom.runner_waits WHERE false;

ROLLBACK;
