-- Revert mailroom:circuit_breaker from pg

BEGIN;

DO $$
BEGIN
  IF EXISTS (SELECT FROM pg_catalog.pg_extension WHERE extname = 'pg_cron') THEN
    PERFORM cron.unschedule(jobid) FROM cron.job WHERE jobname = 'mailroom-breaker-fold';
  END IF;
END
$$;

DROP VIEW mailroom.breaker_status;
DROP FUNCTION mailroom.set_breaker_thresholds(text, integer, integer, numeric, numeric, numeric, numeric);
DROP FUNCTION mailroom.resume_sender(text);
DROP FUNCTION mailroom._breaker_reset(text, text, timestamptz);
DROP FUNCTION mailroom._breaker_count_outcomes(bigint[], text[], bigint[], text[], timestamptz);
DROP FUNCTION mailroom._breaker_tally(text, text, integer, integer, integer, timestamptz);
DROP FUNCTION mailroom._breaker_figures(text, text, integer);
DROP FUNCTION mailroom.breaker_fold();
DROP FUNCTION mailroom._breaker_pending_count(text, text);

COMMIT;
