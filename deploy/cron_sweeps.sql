-- Deploy mailroom:cron_sweeps to pg
-- requires: cache_sweep
-- requires: rate_limit_sweep

BEGIN;

-- Only where pg_cron is installed in this database (the pytest template is
-- deployed without it). The sweeps are housekeeping: reads stay correct
-- without them, the tables just grow.
DO $$
BEGIN
  IF EXISTS (SELECT FROM pg_catalog.pg_extension WHERE extname = 'pg_cron') THEN
    PERFORM cron.schedule('mailroom-cache-sweep', '* * * * *',
                          'SELECT * FROM mailroom.cache_sweep()');
    PERFORM cron.schedule('mailroom-rate-limit-sweep', '* * * * *',
                          'SELECT mailroom.rate_limit_sweep()');
  END IF;
END
$$;

COMMIT;
