-- Tests for mailroom:cron_prune (run in the embedded database, which has pg_cron)
BEGIN;
SELECT plan(3);

SELECT has_extension('pg_cron', 'pg_cron is installed here');
SELECT results_eq($$SELECT schedule, command FROM cron.job WHERE jobname = 'mailroom-prune'$$,
  $$VALUES ('17 * * * *'::text, 'SELECT * FROM mailroom.prune()'::text)$$,
  'one job named mailroom-prune runs prune hourly');
SELECT lives_ok($$SELECT * FROM mailroom.prune()$$, 'the job''s command runs with the default retention');

SELECT * FROM finish();
ROLLBACK;
