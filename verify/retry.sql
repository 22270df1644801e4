-- Verify mailroom:retry on pg

BEGIN;

SELECT 1/has_function_privilege('mailroom_operator', 'mailroom.retry(bigint[])', 'execute')::integer;
SELECT 1/has_function_privilege('mailroom_operator', 'mailroom.retry_campaign(bigint)', 'execute')::integer;
SELECT 1/(NOT has_function_privilege('mailroom_operator', 'mailroom._retry(bigint[])', 'execute'))::integer;
SELECT 'mailroom._check_ids(bigint[])'::regprocedure;
SELECT 1/('not_retried_because' = ANY (proargnames))::integer
FROM pg_catalog.pg_proc WHERE oid = 'mailroom.retry(bigint[])'::regprocedure;
SELECT 1/(pg_catalog.to_regprocedure('mailroom.retry(bigint[], timestamptz)') IS NULL)::integer;

ROLLBACK;
