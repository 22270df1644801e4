-- pgTAP: mailroom.runners (written through runner_heartbeat; see tests/pgtap/runner_heartbeat.sql)
BEGIN;
SELECT plan(10);

SELECT has_table('mailroom', 'runners', 'mailroom.runners exists');
SELECT col_is_pk('mailroom', 'runners', 'worker', 'worker is the primary key');
SELECT is((SELECT relpersistence::text FROM pg_class WHERE oid = 'mailroom.runners'::regclass),
          'u', 'runners is UNLOGGED: crash recovery empties it, heartbeats refill it');
SELECT table_owner_is('mailroom', 'runners', 'mailroom_owner', 'owned by mailroom_owner');
SELECT table_privs_are('mailroom', 'runners', 'mailroom_runner', ARRAY[]::text[], 'runners write only through runner_heartbeat');
SELECT table_privs_are('mailroom', 'runners', 'mailroom_operator', ARRAY[]::text[], 'operators read only runner_status');

SET LOCAL ROLE mailroom_runner;
SELECT throws_ok($$SELECT * FROM mailroom.runners$$, '42501', 'permission denied for table runners',
  'a runner cannot read the table');
SELECT throws_ok($$UPDATE mailroom.runners SET last_seen = now()$$, '42501', 'permission denied for table runners',
  'nor fake another runner''s heartbeat');
RESET ROLE;
SET LOCAL ROLE mailroom_app;
SELECT throws_ok($$DELETE FROM mailroom.runners$$, '42501', 'permission denied for table runners',
  'an application cannot touch it');
RESET ROLE;

SELECT throws_ok($$INSERT INTO mailroom.runners (worker, run_id, host, pid, version, concurrency, heartbeat_interval,
                    started_at, last_seen, in_flight, sent, retried, failed, ambiguous, rate_since, rate_base, relay_up)
                  VALUES ('w', gen_random_uuid(), 'h', 1, 'v', 1, '5 s', now(), now(), 0, 0, 0, 0, 0, now(), 0, false)$$,
                 '23514', 'new row for relation "runners" violates check constraint "runners_relay_down_since"',
                 'a relay that is down says since when');

SELECT * FROM finish();
ROLLBACK;
