-- Verify mailroom:cron_prune on pg

BEGIN;

DO $$
BEGIN
  IF EXISTS (SELECT FROM pg_catalog.pg_extension WHERE extname = 'pg_cron') THEN
    ASSERT EXISTS (SELECT FROM cron.job WHERE jobname = 'mailroom-prune'),
      'pg_cron job mailroom-prune is missing';
  END IF;
END
$$;

ROLLBACK;
