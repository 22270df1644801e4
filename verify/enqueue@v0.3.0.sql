-- Verify mailroom:enqueue on pg

BEGIN;

SELECT 1 / has_function_privilege('mailroom_app',
  'mailroom.enqueue(text, text, text, text, jsonb, text, timestamptz, integer, text, integer, text, jsonb, text, timestamptz)',
  'execute')::int;
SELECT 1 / (prosrc LIKE '%_address_ok(p_to)%')::int
FROM pg_proc
WHERE oid = 'mailroom.enqueue(text, text, text, text, jsonb, text, timestamptz, integer, text, integer, text, jsonb, text, timestamptz)'::regprocedure;
SELECT 1 / (prosrc LIKE '%pg_try_advisory_lock(1835100525, 2)%')::int
FROM pg_proc
WHERE oid = 'mailroom.enqueue(text, text, text, text, jsonb, text, timestamptz, integer, text, integer, text, jsonb, text, timestamptz)'::regprocedure;

ROLLBACK;
