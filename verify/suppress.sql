-- Verify mailroom:suppress on pg

BEGIN;

SELECT 1/has_function_privilege('mailroom_app', 'mailroom.suppress(text, text, text, text)', 'execute')::int;
SELECT 1/has_function_privilege('mailroom_app', 'mailroom.unsuppress(text, text)', 'execute')::int;
SELECT 1/(pg_catalog.to_regprocedure('mailroom.suppress(text, text, text, timestamptz)') IS NULL)::int;
SELECT 1/(pg_catalog.to_regprocedure('mailroom.unsuppress(text)') IS NULL)::int;

ROLLBACK;
