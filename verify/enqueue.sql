-- Verify mailroom:enqueue on pg

BEGIN;

SELECT 1 / has_function_privilege('mailroom_app',
  'mailroom.enqueue(text, text, text, text, jsonb, text, timestamptz, integer, text, integer, text, jsonb, text, text)',
  'execute')::int;
SELECT 1 / (prosrc LIKE '%INSERT INTO mailroom.queue%' AND prosrc LIKE '%LOCK TABLE mailroom.enqueue_barrier IN ROW EXCLUSIVE MODE%' AND prosrc NOT LIKE '%advisory%')::int
FROM pg_proc
WHERE oid = 'mailroom.enqueue(text, text, text, text, jsonb, text, timestamptz, integer, text, integer, text, jsonb, text, text)'::regprocedure;
SELECT 1 / (pg_catalog.to_regprocedure(
  'mailroom.enqueue(text, text, text, text, jsonb, text, timestamptz, integer, text, integer, text, jsonb, text, timestamptz)') IS NULL)::int;

ROLLBACK;
