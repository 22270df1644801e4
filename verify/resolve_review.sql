-- Verify mailroom:resolve_review on pg

BEGIN;

SELECT 1/has_function_privilege('mailroom_operator', 'mailroom.resolve_review(bigint, text)', 'execute')::integer;
SELECT 1/(pg_catalog.to_regprocedure('mailroom.resolve_review(bigint, text, timestamptz)') IS NULL)::integer;

ROLLBACK;
