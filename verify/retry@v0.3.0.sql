-- Verify mailroom:retry on pg

BEGIN;

SELECT 1/has_function_privilege('mailroom_operator', 'mailroom.retry(bigint[], timestamptz)', 'execute')::integer;
SELECT 1/has_function_privilege('mailroom_operator', 'mailroom.retry_campaign(bigint, timestamptz)', 'execute')::integer;
SELECT 'mailroom._check_ids(bigint[])'::regprocedure;

ROLLBACK;
