-- pgTAP: materialize_schedules — due occurrences become messages, once per local period.
BEGIN;
SELECT plan(15);
SET LOCAL timezone = 'UTC';

SELECT has_function('mailroom', 'materialize_schedules', ARRAY['integer'], 'materialize_schedules exists');
SELECT is_definer('mailroom', 'materialize_schedules', ARRAY['integer'], 'it is SECURITY DEFINER');
SELECT function_privs_are('mailroom', 'materialize_schedules', ARRAY['integer'],
  'mailroom_app', ARRAY[]::text[], 'applications do not run it (pg_cron and operators do)');
SELECT function_privs_are('mailroom', '_materialize_schedules', ARRAY['integer', 'timestamp with time zone'],
  'mailroom_operator', ARRAY[]::text[], 'the pinned-clock twin is the owner''s alone');

SELECT mailroom.upsert_template('digest', 'Your week', 'Hello');
SELECT mailroom._schedule_upsert('d:' || z, 'u' || n || '@example.org', '0 8 * * 1', z, 'digest', p_now => '2026-03-20Z')
FROM unnest(ARRAY['Europe/Berlin', 'America/New_York', 'Australia/Sydney', 'Asia/Kolkata', 'UTC']) WITH ORDINALITY AS t(z, n);

SELECT is(mailroom._materialize_schedules(p_now => '2026-03-23 07:00Z'), 3, 'Sydney, Kolkata and Berlin are due by 07:00 UTC Monday (+5 min lookahead)');
SELECT is(mailroom._materialize_schedules(p_now => '2026-03-23 07:00Z'), 0, 'run twice at the same p_now: nothing more');
SELECT results_eq($$SELECT s.time_zone, m.run_at, substring(m.delivery_key FROM ':([^:]+:[^:]+):email$')
                    FROM mailroom.messages m JOIN mailroom.schedules s ON s.id = m.schedule_id ORDER BY m.run_at$$,
  $$VALUES ('Australia/Sydney', '2026-03-22 21:00Z'::timestamptz, '2026-03-23T08:00'),
           ('Asia/Kolkata', '2026-03-23 02:30Z'::timestamptz, '2026-03-23T08:00'),
           ('Europe/Berlin', '2026-03-23 07:00Z'::timestamptz, '2026-03-23T08:00')$$,
  'each at Monday 08:00 local, keyed by the local period');
SELECT is((SELECT count(*)::int FROM mailroom.messages WHERE to_address = 'u5@example.org'), 0, 'UTC 08:00 is not due yet');

-- the same occurrence can never be queued twice, even if next_run_at is reset
UPDATE mailroom.schedules SET next_run_at = '2026-03-23 07:00Z' WHERE schedule_key = 'd:Europe/Berlin';
SELECT is(mailroom._materialize_schedules(p_now => '2026-03-23 07:01Z'), 0, 'a re-materialized period adds nothing (ON CONFLICT DO NOTHING)');

-- bounded batches
SELECT mailroom._schedule_upsert('b:' || g, 'b' || g || '@example.org', '0 12 * * *', 'UTC', 'digest', p_now => '2026-03-21 11:00Z')
FROM generate_series(1, 5) g;
SELECT is(mailroom._materialize_schedules(3, '2026-03-21 12:00Z'), 3, 'at most p_limit schedules per call');
SELECT is(mailroom._materialize_schedules(3, '2026-03-21 12:00Z'), 2, 'the rest on the next call');

-- a long outage: missed occurrences older than schedule_max_lateness are skipped
SELECT mailroom._schedule_upsert('late', 'late@example.org', '0 9 * * *', 'UTC', 'digest', p_now => '2026-01-01Z');
SELECT is(mailroom._materialize_schedules(100, '2026-03-10 10:00Z') >= 1, true, 'after an outage the schedule runs again');
SELECT is((SELECT string_agg(to_char(run_at, 'MM-DD HH24:MI'), ',' ORDER BY run_at) FROM mailroom.messages WHERE to_address = 'late@example.org'),
  '03-10 09:00', 'only the occurrence within the last day is sent, not 68 missed ones');

-- suppressed recipients: recorded, cancelled
SELECT mailroom.suppress('sup@Example.org', 'unsubscribed');
SELECT mailroom._schedule_upsert('s', 'sup@example.org', '0 9 * * *', 'UTC', 'digest', p_now => '2026-03-10 08:00Z');
SELECT mailroom._materialize_schedules(p_now => '2026-03-10 09:00Z');
SELECT results_eq($$SELECT status, status_reason FROM mailroom.messages WHERE to_address = 'sup@example.org'$$,
  $$VALUES ('cancelled', 'suppressed')$$, 'mail to a suppressed address is stored cancelled');

SELECT throws_ok($$SELECT mailroom.materialize_schedules(0)$$, '22023', 'mailroom: limit: must be between 1 and 1000000, got 0', 'bad limit');

SELECT * FROM finish();
ROLLBACK;
