-- Tests for mailroom:view_runner_status
BEGIN;
SELECT plan(9);
SET LOCAL client_min_messages = warning;
TRUNCATE mailroom.runners;

SELECT has_view('mailroom', 'runner_status', 'runner_status exists');
SELECT view_owner_is('mailroom', 'runner_status', 'mailroom_owner', 'owned by mailroom_owner');
SELECT ok((SELECT 'security_barrier=true' = ANY (reloptions) FROM pg_class WHERE oid = 'mailroom.runner_status'::regclass),
  'a security barrier view');
SELECT table_privs_are('mailroom', 'runner_status', 'mailroom_operator', ARRAY['SELECT'], 'operators may read it');

-- Four runners beating every 5 seconds: one just now, one 14 s ago (within
-- three intervals), one 16 s ago (lost), one that said goodbye.
SELECT mailroom.runner_heartbeat(w, gen_random_uuid(), 'host-' || w, 100, '0.4.0', NULL, 4, '5 seconds',
                                 0, 0, 0, 0, 0, true, NULL)
FROM unnest(ARRAY['fresh', 'late', 'silent', 'stopped']) AS w;
UPDATE mailroom.runners SET last_seen = now() - interval '14 seconds' WHERE worker = 'late';
UPDATE mailroom.runners SET last_seen = now() - interval '16 seconds' WHERE worker = 'silent';
SELECT mailroom.runner_gone(worker, run_id) FROM mailroom.runners WHERE worker = 'stopped';

SELECT results_eq(
  $$SELECT worker COLLATE "default", state, alive, seen_ago FROM mailroom.runner_status$$,
  $$VALUES ('fresh'::text, 'running'::text, true, interval '0'), ('late', 'running', true, interval '14 seconds'),
           ('silent', 'lost', false, interval '16 seconds'), ('stopped', 'stopped', false, interval '0')$$,
  'alive within three heartbeat intervals, live ones first; a clean stop is stopped, silence is lost');

-- The threshold is the runner's own interval: the same silence is fine for a runner beating every 10 s.
UPDATE mailroom.runners SET heartbeat_interval = '10 seconds' WHERE worker = 'silent';
SELECT is((SELECT state FROM mailroom.runner_status WHERE worker = 'silent'), 'running',
  '16 s of silence is alive for a 10-second heartbeat');

SET LOCAL ROLE mailroom_operator;
SELECT is((SELECT count(*)::int FROM mailroom.runner_status), 4, 'an operator reads it');
RESET ROLE;
SET LOCAL ROLE mailroom_app;
SELECT throws_ok($$SELECT * FROM mailroom.runner_status$$, '42501', 'permission denied for view runner_status', 'apps get 42501');
RESET ROLE;
SET LOCAL ROLE mailroom_runner;
SELECT throws_ok($$SELECT * FROM mailroom.runner_status$$, '42501', 'permission denied for view runner_status', 'runners get 42501');
RESET ROLE;

SELECT * FROM finish();
ROLLBACK;
