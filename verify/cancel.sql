-- Verify mailroom:cancel on pg

BEGIN;

SELECT 1/has_function_privilege('mailroom_operator', 'mailroom.cancel(bigint[], text)', 'execute')::integer;
SELECT 1/(pg_catalog.to_regprocedure('mailroom.cancel(bigint[], text, timestamptz)') IS NULL)::integer;

ROLLBACK;
