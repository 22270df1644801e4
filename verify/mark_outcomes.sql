-- Verify mailroom:mark_outcomes on pg

BEGIN;

SELECT has_function_privilege('mailroom_runner', 'mailroom.mark_outcomes(jsonb)', 'execute');
SELECT has_function_privilege('mailroom_runner',
  'mailroom.mark_outcome(bigint, uuid, text, text, integer, text, text)', 'execute');
SELECT mailroom._retry_delay(1);
DO $$
BEGIN
  ASSERT NOT has_function_privilege('mailroom_runner', 'mailroom._mark_outcomes(jsonb, timestamptz)', 'execute'),
    'the clock-pinning _mark_outcomes must be owner-only';
  ASSERT NOT has_function_privilege('mailroom_runner',
           'mailroom._mark_outcome(bigint, uuid, text, text, integer, text, text, timestamptz)', 'execute'),
    'the clock-pinning _mark_outcome must be owner-only';
  ASSERT (SELECT prosrc LIKE '%DELETE FROM mailroom.queue%' FROM pg_proc
          WHERE oid = 'mailroom._mark_outcomes(jsonb, timestamptz)'::regprocedure),
    'mark_outcomes does not take finished mail out of the hot queue';
  ASSERT to_regprocedure('mailroom.mark_outcomes(jsonb, timestamptz)') IS NULL,
    'the v0.3 mark_outcomes with p_now is still executable';
  ASSERT (SELECT prosrc LIKE '%_learn_destination_rates%' FROM pg_proc
          WHERE oid = 'mailroom._mark_outcomes(jsonb, timestamptz)'::regprocedure),
    'mark_outcomes does not teach the adaptive throttle';
END
$$;

ROLLBACK;
