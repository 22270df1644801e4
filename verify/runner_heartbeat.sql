-- Verify mailroom:runner_heartbeat on pg

BEGIN;

SELECT 1/has_function_privilege('mailroom_runner',
  'mailroom.runner_heartbeat(text, uuid, text, integer, text, text, integer, interval, integer, bigint, bigint, bigint, bigint, boolean, text)',
  'execute')::integer;
SELECT 1/has_function_privilege('mailroom_runner', 'mailroom.runner_gone(text, uuid)', 'execute')::integer;

ROLLBACK;
