-- Deploy mailroom:cron_jobs to pg
-- requires: reclaim
-- requires: materialize_schedules
-- requires: campaign_control

-- Installs the pg_cron jobs, named so they can be listed (SELECT * FROM
-- cron.job WHERE jobname LIKE 'mailroom-%') and removed. Only where pg_cron
-- exists in this database (cron.database_name); elsewhere runners still call
-- reclaim() before claiming, and materialize_schedules() can be run by any
-- scheduler.

BEGIN;

DO $$
BEGIN
  IF EXISTS (SELECT FROM pg_catalog.pg_extension WHERE extname = 'pg_cron') THEN
    PERFORM cron.schedule('mailroom-reclaim', '* * * * *', 'SELECT mailroom.reclaim()');
    PERFORM cron.schedule('mailroom-materialize', '* * * * *',
                          'SELECT mailroom.materialize_schedules(); SELECT mailroom.finish_campaigns()');
  ELSE
    RAISE NOTICE 'mailroom: pg_cron is not installed in this database: no jobs scheduled';
  END IF;
END
$$;

COMMIT;
