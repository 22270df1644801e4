-- Verify mailroom:mark_outcomes on pg

BEGIN;

SELECT has_function_privilege('mailroom_runner', 'mailroom.mark_outcomes(jsonb, timestamptz)', 'execute');
SELECT has_function_privilege('mailroom_runner',
  'mailroom.mark_outcome(bigint, uuid, text, text, integer, text, text, timestamptz)', 'execute');
SELECT mailroom._retry_delay(1);
DO $$
BEGIN
  ASSERT (SELECT proconfig @> ARRAY['plan_cache_mode=force_custom_plan', 'enable_seqscan=off']
          FROM pg_proc WHERE oid = 'mailroom.mark_outcomes(jsonb, timestamptz)'::regprocedure),
    'mark_outcomes does not plan every call without sequential scans';
END
$$;
DO $$
BEGIN
  ASSERT (SELECT prosrc LIKE '%INSERT INTO mailroom.attempts%' FROM pg_proc WHERE oid = 'mailroom.mark_outcomes(jsonb, timestamptz)'::regprocedure),
    'mark_outcomes does not write the ledger row of a live lease';
END
$$;

ROLLBACK;
