-- Deploy mailroom:cron_prune to pg
-- requires: prune

BEGIN;

-- Only where pg_cron is installed in this database (the pytest template is
-- deployed without it). A named job: rescheduling replaces it.
DO $$
BEGIN
  IF EXISTS (SELECT FROM pg_catalog.pg_extension WHERE extname = 'pg_cron') THEN
    PERFORM cron.schedule('mailroom-prune', '17 * * * *', 'SELECT * FROM mailroom.prune()');
  END IF;
END
$$;

COMMIT;
