-- Verify mailroom:enqueue on pg

BEGIN;

SELECT has_function_privilege('mailroom_app',
  'mailroom.enqueue(text, text, text, text, jsonb, text, timestamptz, integer, text, integer, text, jsonb, text, timestamptz)',
  'execute');

ROLLBACK;
