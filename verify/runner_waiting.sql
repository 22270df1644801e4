-- Verify mailroom:runner_waiting on pg

BEGIN;

SELECT 1/has_function_privilege('mailroom_runner', 'mailroom.runner_waiting(boolean)', 'execute')::integer;
SELECT 1/has_function_privilege('mailroom_runner', 'mailroom.enqueues_settled()', 'execute')::integer;
SELECT pid, since FROM mailroom.runner_waits WHERE false;
SELECT 1/(NOT has_table_privilege('mailroom_app', 'mailroom.enqueue_barrier', 'insert'))::integer;
SELECT 1/(pg_get_functiondef('mailroom.enqueues_settled()'::regprocedure) LIKE '%LOCK TABLE mailroom.enqueue_barrier%')::integer;

ROLLBACK;
