-- Verify mailroom:claim_batch on pg

BEGIN;

SELECT has_function_privilege('mailroom_runner',
  'mailroom.claim_batch(text, integer, interval, text, timestamptz)', 'execute');

ROLLBACK;
