-- Verify mailroom:resolve_review on pg

BEGIN;

SELECT 1/has_function_privilege('mailroom_operator', 'mailroom.resolve_review(bigint, text, timestamptz)', 'execute')::integer;

ROLLBACK;
