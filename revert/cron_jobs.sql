-- Revert mailroom:cron_jobs from pg

BEGIN;

DO $$
BEGIN
  IF EXISTS (SELECT FROM pg_catalog.pg_extension WHERE extname = 'pg_cron') THEN
    PERFORM cron.unschedule(jobname) FROM cron.job
    WHERE jobname IN ('mailroom-reclaim', 'mailroom-materialize');
  END IF;
END
$$;

COMMIT;
