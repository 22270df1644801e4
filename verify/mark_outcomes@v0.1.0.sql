-- Verify mailroom:mark_outcomes on pg

BEGIN;

SELECT has_function_privilege('mailroom_runner', 'mailroom.mark_outcomes(jsonb, timestamptz)', 'execute');
SELECT has_function_privilege('mailroom_runner',
  'mailroom.mark_outcome(bigint, uuid, text, text, integer, text, text, timestamptz)', 'execute');
SELECT mailroom._retry_delay(1);

ROLLBACK;
