-- Verify mailroom:cron_sweeps on pg

BEGIN;

DO $$
BEGIN
  IF EXISTS (SELECT FROM pg_catalog.pg_extension WHERE extname = 'pg_cron') THEN
    ASSERT (SELECT count(*) FROM cron.job
             WHERE jobname IN ('mailroom-cache-sweep', 'mailroom-rate-limit-sweep')
               AND database = current_database()) = 2,
           'the pg_cron sweep jobs are missing';
  END IF;
END
$$;

ROLLBACK;
