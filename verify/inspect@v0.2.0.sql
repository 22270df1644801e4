-- Verify mailroom:inspect on pg

BEGIN;

SELECT 1/has_function_privilege('mailroom_operator', 'mailroom.inspect(text)', 'execute')::integer;

ROLLBACK;
