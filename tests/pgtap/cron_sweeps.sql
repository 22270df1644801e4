-- pgTAP: pg_cron jobs of the sweeps
BEGIN;
SELECT plan(2);

SELECT CASE WHEN EXISTS (SELECT FROM pg_extension WHERE extname = 'pg_cron')
  THEN is((SELECT string_agg(format('%s|%s|%s', jobname, schedule, command), E'\n' ORDER BY jobname)
             FROM cron.job WHERE jobname LIKE 'mailroom-%sweep'),
          E'mailroom-cache-sweep|* * * * *|SELECT * FROM mailroom.cache_sweep()\n'
          'mailroom-rate-limit-sweep|* * * * *|SELECT mailroom.rate_limit_sweep()',
          'both sweeps run every minute')
  ELSE pass('pg_cron is not installed here: no jobs expected') END;
SELECT CASE WHEN EXISTS (SELECT FROM pg_extension WHERE extname = 'pg_cron')
  THEN is((SELECT count(*) FROM cron.job WHERE jobname LIKE 'mailroom-%sweep' AND database <> current_database()), 0::bigint,
          'the jobs run in this database')
  ELSE pass('pg_cron is not installed here') END;

SELECT * FROM finish();
ROLLBACK;
