-- Tests for mailroom:runner_heartbeat (the runner's side in tests/test_heartbeat.py)
BEGIN;
SELECT plan(44);
SET LOCAL client_min_messages = warning;
TRUNCATE mailroom.runners;

-- Contract
SELECT has_function('mailroom', 'runner_heartbeat',
  ARRAY['text', 'uuid', 'text', 'integer', 'text', 'text', 'integer', 'interval', 'integer',
        'bigint', 'bigint', 'bigint', 'bigint', 'boolean', 'text']);
SELECT has_function('mailroom', 'runner_gone', ARRAY['text', 'uuid']);
SELECT is_definer('mailroom', 'runner_heartbeat',
  ARRAY['text', 'uuid', 'text', 'integer', 'text', 'text', 'integer', 'interval', 'integer',
        'bigint', 'bigint', 'bigint', 'bigint', 'boolean', 'text']);
SELECT is_definer('mailroom', 'runner_gone', ARRAY['text', 'uuid']);
SELECT function_privs_are('mailroom', 'runner_heartbeat',
  ARRAY['text', 'uuid', 'text', 'integer', 'text', 'text', 'integer', 'interval', 'integer',
        'bigint', 'bigint', 'bigint', 'bigint', 'boolean', 'text'],
  'mailroom_runner', ARRAY['EXECUTE'], 'runners may beat');
SELECT function_privs_are('mailroom', 'runner_heartbeat',
  ARRAY['text', 'uuid', 'text', 'integer', 'text', 'text', 'integer', 'interval', 'integer',
        'bigint', 'bigint', 'bigint', 'bigint', 'boolean', 'text'],
  'mailroom_app', ARRAY[]::text[], 'applications may not');
SELECT function_privs_are('mailroom', 'runner_gone', ARRAY['text', 'uuid'], 'mailroom_runner', ARRAY['EXECUTE'],
  'runners may say goodbye');
SELECT function_privs_are('mailroom', 'runner_gone', ARRAY['text', 'uuid'], 'mailroom_operator', ARRAY[]::text[],
  'operators may not mark runners gone');
SELECT is((SELECT array_agg(DISTINCT c ORDER BY c) FROM pg_proc p, unnest(p.proconfig) c
            WHERE p.proname IN ('runner_heartbeat', 'runner_gone') AND p.pronamespace = 'mailroom'::regnamespace),
          ARRAY['search_path=mailroom, pg_temp'], 'both pin their search_path');

-- Every argument named, defaults for the fields a test does not care about.
CREATE FUNCTION pg_temp.beat(
  p_worker text DEFAULT 'w1', p_run_id uuid DEFAULT '00000000-0000-0000-0000-00000000000a',
  p_host text DEFAULT 'host-a', p_pid integer DEFAULT 4242, p_version text DEFAULT '0.4.0',
  p_sender text DEFAULT NULL, p_concurrency integer DEFAULT 8, p_interval interval DEFAULT '5 seconds',
  p_in_flight integer DEFAULT 0, p_sent bigint DEFAULT 0, p_retried bigint DEFAULT 0, p_failed bigint DEFAULT 0,
  p_ambiguous bigint DEFAULT 0, p_relay_up boolean DEFAULT true, p_relay_error text DEFAULT NULL)
RETURNS void LANGUAGE sql AS $$
  SELECT mailroom.runner_heartbeat(p_worker, p_run_id, p_host, p_pid, p_version, p_sender, p_concurrency,
    p_interval, p_in_flight, p_sent, p_retried, p_failed, p_ambiguous, p_relay_up, p_relay_error)
$$;

-- Behaviour: the first beat, as a runner.
SET LOCAL ROLE mailroom_runner;
SELECT lives_ok($$SELECT mailroom.runner_heartbeat('w1', '00000000-0000-0000-0000-00000000000a', 'host-a', 4242,
                  '0.4.0', NULL, 8, '5 seconds', 3, 10, 2, 1, 0, true, NULL)$$, 'a runner writes its heartbeat');
RESET ROLE;
SELECT results_eq(
  $$SELECT host, pid, version, sender, concurrency, heartbeat_interval, in_flight, sent, retried, failed, ambiguous,
           relay_up, relay_error, started_at = now(), last_seen = now(), stopped_at FROM mailroom.runners$$,
  $$VALUES ('host-a'::text, 4242, '0.4.0'::text, NULL::text, 8, interval '5 seconds', 3, 10::bigint, 2::bigint, 1::bigint,
            0::bigint, true, NULL::text, true, true, NULL::timestamptz)$$,
  'one row: what the runner said, stamped with the database clock');

-- Ten seconds later (moved back by hand: functions a role can call take no clock),
-- 30 more sent: the rate over the sample, started_at kept.
UPDATE mailroom.runners SET started_at = now() - interval '1 minute', last_seen = now() - interval '10 seconds',
                            rate_since = now() - interval '10 seconds';
SELECT pg_temp.beat(p_sent => 40, p_in_flight => 5);
SELECT results_eq(
  $$SELECT sent, in_flight, sent_per_second, started_at = now() - interval '1 minute', last_seen = now() FROM mailroom.runners$$,
  $$VALUES (40::bigint, 5, 3.0::numeric, true, true)$$, 'same run: counts replaced, rate per second, started_at kept');
SELECT pg_temp.beat(p_sent => 41);
SELECT is((SELECT sent_per_second FROM mailroom.runners), 3.0::numeric, 'a beat a moment later leaves the rate alone');

-- The relay goes down, stays down, comes back.
SELECT pg_temp.beat(p_relay_up => false, p_relay_error => 'connect: [Errno 111] Connection refused');
SELECT results_eq($$SELECT relay_up, relay_down_since = now(), relay_error FROM mailroom.runners$$,
  $$VALUES (false, true, 'connect: [Errno 111] Connection refused'::text)$$, 'relay down: since now, with its reason');
UPDATE mailroom.runners SET relay_down_since = now() - interval '1 minute';
SELECT pg_temp.beat(p_relay_up => false, p_relay_error => 'connect: timed out');
SELECT results_eq($$SELECT relay_down_since = now() - interval '1 minute', relay_error FROM mailroom.runners$$,
  $$VALUES (true, 'connect: timed out'::text)$$, 'still down: since the first beat that said so, the latest reason');
SELECT pg_temp.beat(p_relay_error => 'stale reason');
SELECT results_eq($$SELECT relay_up, relay_down_since, relay_error FROM mailroom.runners$$,
  $$VALUES (true, NULL::timestamptz, NULL::text)$$, 'back up: no since, no reason kept');

-- Clean stop, then a restart under the same worker name.
SELECT is(mailroom.runner_gone('w1', '00000000-0000-0000-0000-00000000000b'), false,
  'another run cannot mark this one gone');
SELECT is((SELECT stopped_at FROM mailroom.runners), NULL::timestamptz, 'so it is not stopped');
SET LOCAL ROLE mailroom_runner;
SELECT is(mailroom.runner_gone('w1', '00000000-0000-0000-0000-00000000000a'), true, 'the run says goodbye');
RESET ROLE;
SELECT is((SELECT stopped_at = now() FROM mailroom.runners), true, 'stopped now');
UPDATE mailroom.runners SET started_at = now() - interval '1 hour';
SELECT pg_temp.beat(p_run_id => '00000000-0000-0000-0000-00000000000b', p_pid => 4343, p_sent => 2);
SELECT results_eq($$SELECT pid, sent, sent_per_second, started_at = now(), stopped_at FROM mailroom.runners$$,
  $$VALUES (4343, 2::bigint, 0::numeric, true, NULL::timestamptz)$$,
  'a new run_id is a restart: started_at, counters and rate start over, no longer stopped');

-- Forgetting: a runner unseen for a day goes at the next heartbeat of anyone;
-- one unseen for an hour stays (runner_status shows it as lost).
SELECT pg_temp.beat(p_worker => 'crashed-yesterday');
SELECT pg_temp.beat(p_worker => 'crashed-an-hour-ago');
UPDATE mailroom.runners SET last_seen = now() - interval '25 hours' WHERE worker = 'crashed-yesterday';
UPDATE mailroom.runners SET last_seen = now() - interval '1 hour' WHERE worker = 'crashed-an-hour-ago';
SELECT pg_temp.beat();
SELECT results_eq($$SELECT worker COLLATE "default" FROM mailroom.runners ORDER BY worker$$,
  $$VALUES ('crashed-an-hour-ago'::text), ('w1')$$, 'rows unseen for a day are forgotten');

-- Errors: SQLSTATE 22023 naming the field, and nothing written.
CREATE TEMP TABLE before AS SELECT * FROM mailroom.runners;
SELECT throws_ok($$SELECT pg_temp.beat(p_worker => NULL)$$, '22023',
  'mailroom: worker: must be 1 to 200 characters without control characters', 'worker NULL');
SELECT throws_ok($$SELECT pg_temp.beat(p_worker => E'w\n2')$$, '22023',
  'mailroom: worker: must be 1 to 200 characters without control characters', 'worker with a newline');
SELECT throws_ok($$SELECT pg_temp.beat(p_worker => repeat('w', 201))$$, '22023',
  'mailroom: worker: must be 1 to 200 characters without control characters', 'worker too long');
SELECT throws_ok($$SELECT pg_temp.beat(p_run_id => NULL)$$, '22023', 'mailroom: run_id: must not be NULL', 'run_id NULL');
SELECT throws_ok($$SELECT pg_temp.beat(p_host => '')$$, '22023',
  'mailroom: host: must be 1 to 255 characters without control characters', 'host empty');
SELECT throws_ok($$SELECT pg_temp.beat(p_pid => 0)$$, '22023', 'mailroom: pid: must be a positive integer', 'pid 0');
SELECT throws_ok($$SELECT pg_temp.beat(p_version => repeat('1', 65))$$, '22023',
  'mailroom: version: must be 1 to 64 characters without control characters', 'version too long');
SELECT throws_ok($$SELECT pg_temp.beat(p_sender => '')$$, '22023',
  'mailroom: sender: must be NULL (all senders) or 1 to 200 characters without control characters', 'sender empty');
SELECT throws_ok($$SELECT pg_temp.beat(p_concurrency => 0)$$, '22023',
  'mailroom: concurrency: must be between 1 and 100000', 'concurrency 0');
SELECT throws_ok($$SELECT pg_temp.beat(p_interval => '500 milliseconds')$$, '22023',
  'mailroom: interval: must be between 1 second and 1 hour', 'interval under a second');
SELECT throws_ok($$SELECT pg_temp.beat(p_in_flight => -1)$$, '22023', 'mailroom: in_flight: must be 0 or more', 'in_flight negative');
SELECT throws_ok($$SELECT pg_temp.beat(p_sent => NULL)$$, '22023', 'mailroom: sent: must be 0 or more', 'sent NULL');
SELECT throws_ok($$SELECT pg_temp.beat(p_retried => -1)$$, '22023', 'mailroom: retried: must be 0 or more', 'retried negative');
SELECT throws_ok($$SELECT pg_temp.beat(p_failed => -1)$$, '22023', 'mailroom: failed: must be 0 or more', 'failed negative');
SELECT throws_ok($$SELECT pg_temp.beat(p_ambiguous => -1)$$, '22023', 'mailroom: ambiguous: must be 0 or more', 'ambiguous negative');
SELECT throws_ok($$SELECT pg_temp.beat(p_relay_up => NULL)$$, '22023', 'mailroom: relay_up: must be true or false', 'relay_up NULL');
SELECT throws_ok($$SELECT pg_temp.beat(p_relay_up => false, p_relay_error => repeat('x', 301))$$, '22023',
  'mailroom: relay_error: must be at most 300 characters without control characters', 'relay_error too long');
SELECT throws_ok($$SELECT pg_temp.beat(p_relay_up => false,
                    p_relay_error => 'auth failed for smtp://apikey:s3cret@smtp.example.net:587')$$, '22023',
  'mailroom: relay_error: must not contain a URL with a password', 'a relay error carrying a password is refused');
SELECT lives_ok($$SELECT pg_temp.beat(p_worker => 'redacted', p_relay_up => false,
                   p_relay_error => 'auth failed for smtp://apikey:***@smtp.example.net:587')$$,
  'the redacted form is stored');
DELETE FROM mailroom.runners WHERE worker = 'redacted';
SELECT throws_ok($$SELECT mailroom.runner_gone(NULL, '00000000-0000-0000-0000-00000000000b')$$, '22023',
  'mailroom: worker: must not be NULL', 'runner_gone: worker NULL');
SELECT throws_ok($$SELECT mailroom.runner_gone('w1', NULL)$$, '22023',
  'mailroom: run_id: must not be NULL', 'runner_gone: run_id NULL');
SELECT results_eq($$SELECT * FROM mailroom.runners ORDER BY worker$$, $$SELECT * FROM before ORDER BY worker$$,
  'no refused call changed anything');

SELECT * FROM finish();
ROLLBACK;
