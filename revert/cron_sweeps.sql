-- Revert mailroom:cron_sweeps from pg

BEGIN;

DO $$
BEGIN
  IF EXISTS (SELECT FROM pg_catalog.pg_extension WHERE extname = 'pg_cron') THEN
    PERFORM cron.unschedule(jobid) FROM cron.job
      WHERE jobname IN ('mailroom-cache-sweep', 'mailroom-rate-limit-sweep');
  END IF;
END
$$;

COMMIT;
