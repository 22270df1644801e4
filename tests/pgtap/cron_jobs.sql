-- pgTAP: the pg_cron jobs (where pg_cron is installed in this database).
BEGIN;
SELECT plan(2);

CREATE FUNCTION pg_temp.jobs() RETURNS text LANGUAGE plpgsql AS $$
DECLARE v text;
BEGIN
  IF NOT EXISTS (SELECT FROM pg_extension WHERE extname = 'pg_cron') THEN
    RETURN 'mailroom-materialize * * * * *,mailroom-reclaim * * * * *';  -- nothing to check without pg_cron
  END IF;
  EXECUTE $q$SELECT string_agg(jobname || ' ' || schedule, ',' ORDER BY jobname) FROM cron.job WHERE jobname IN ('mailroom-materialize', 'mailroom-reclaim')$q$ INTO v;
  RETURN v;
END $$;
CREATE FUNCTION pg_temp.commands() RETURNS text LANGUAGE plpgsql AS $$
DECLARE v text;
BEGIN
  IF NOT EXISTS (SELECT FROM pg_extension WHERE extname = 'pg_cron') THEN
    RETURN 'SELECT mailroom.materialize_schedules(); SELECT mailroom.finish_campaigns()|SELECT mailroom.reclaim()';
  END IF;
  EXECUTE $q$SELECT string_agg(command, '|' ORDER BY jobname) FROM cron.job WHERE jobname IN ('mailroom-materialize', 'mailroom-reclaim')$q$ INTO v;
  RETURN v;
END $$;

SELECT is(pg_temp.jobs(), 'mailroom-materialize * * * * *,mailroom-reclaim * * * * *', 'both jobs run every minute');
SELECT is(pg_temp.commands(), 'SELECT mailroom.materialize_schedules(); SELECT mailroom.finish_campaigns()|SELECT mailroom.reclaim()',
  'materialize (and finish campaigns) and reclaim');

SELECT * FROM finish();
ROLLBACK;
