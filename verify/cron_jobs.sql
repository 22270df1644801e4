-- Verify mailroom:cron_jobs on pg

BEGIN;

DO $$
BEGIN
  IF EXISTS (SELECT FROM pg_catalog.pg_extension WHERE extname = 'pg_cron') THEN
    ASSERT (SELECT count(*) FROM cron.job
            WHERE jobname IN ('mailroom-reclaim', 'mailroom-materialize')) = 2,
           'the pg_cron jobs mailroom-reclaim and mailroom-materialize are missing';
  END IF;
END
$$;

ROLLBACK;
