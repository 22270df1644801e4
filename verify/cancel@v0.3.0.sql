-- Verify mailroom:cancel on pg

BEGIN;

SELECT 1/has_function_privilege('mailroom_operator', 'mailroom.cancel(bigint[], text, timestamptz)', 'execute')::integer;

ROLLBACK;
