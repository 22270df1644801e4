-- Tests for mailroom:delivery_metrics
BEGIN;
SELECT plan(16);
SET LOCAL client_min_messages = warning;
\ir include/core_state.psql

SELECT has_function('mailroom', 'delivery_metrics', ARRAY['interval'], 'delivery_metrics exists');
SELECT hasnt_function('mailroom', 'delivery_metrics', ARRAY['interval', 'timestamp with time zone'],
  'and takes no clock parameter');
SELECT is_definer('mailroom', 'delivery_metrics', ARRAY['interval'], 'it is SECURITY DEFINER');
SELECT function_privs_are('mailroom', 'delivery_metrics', ARRAY['interval'],
  'mailroom_operator', ARRAY['EXECUTE'], 'operators may call it');
SELECT function_privs_are('mailroom', 'delivery_metrics', ARRAY['interval'],
  'mailroom_runner', ARRAY[]::text[], 'runners may not');
SELECT function_privs_are('mailroom', '_delivery_metrics', ARRAY['interval', 'timestamp with time zone'],
  'mailroom_operator', ARRAY[]::text[], 'the twin that pins the clock is the owner''s only');

-- Window: (00:00, 01:00]. alpha: a1 sent on the first try in 2 s; a2 retried once,
-- then sent in 10 s. beta: b1's first runner hangs (lease expires), the second
-- sends in 4 s, then the first reports sent too after 7 minutes (a duplicate);
-- b2 fails; b3 is overdue since 00:30; b4 is in flight. old: sent before the window.
SELECT pg_temp.t_mail(k, s, '2029-12-31 23:00Z', t::timestamptz)
FROM (VALUES ('a1', 'alpha', '2030-01-01 00:10Z'), ('a2', 'alpha', '2030-01-01 00:20Z'),
             ('b1', 'beta', '2030-01-01 00:40Z'), ('b2', 'beta', '2030-01-01 00:50Z'),
             ('b3', 'beta', '2030-01-01 00:30Z'), ('b4', 'beta', '2030-01-01 00:55Z'),
             ('old', 'alpha', '2029-12-31 23:00Z')) AS v(k, s, t);
SELECT pg_temp.t_claim('old', 'w', '2029-12-31 23:00Z');
SELECT pg_temp.t_end('old', 'sent', '2029-12-31 23:00:01Z', 'sent');
SELECT pg_temp.t_claim('a1', 'w', '2030-01-01 00:10Z');
SELECT pg_temp.t_end('a1', 'sent', '2030-01-01 00:10:02Z', 'sent');
SELECT pg_temp.t_claim('a2', 'w', '2030-01-01 00:20Z');
SELECT pg_temp.t_end('a2', 'retry', '2030-01-01 00:20:01Z', 'retry');
SELECT pg_temp.t_claim('a2', 'w', '2030-01-01 00:25Z');
SELECT pg_temp.t_end('a2', 'sent', '2030-01-01 00:25:10Z', 'sent');
SELECT pg_temp.t_claim('b1', 'w1', '2030-01-01 00:40Z');
SELECT pg_temp.t_end('b1', 'expired', '2030-01-01 00:45Z');  -- reclaim
SELECT pg_temp.t_claim('b1', 'w2', '2030-01-01 00:46Z');
SELECT pg_temp.t_end('b1', 'sent', '2030-01-01 00:46:04Z', 'sent');
SELECT pg_temp.t_late('b1', 'w1', '2030-01-01 00:47Z', p_duplicate => true);
SELECT pg_temp.t_claim('b2', 'w', '2030-01-01 00:51Z');
SELECT pg_temp.t_end('b2', 'failed', '2030-01-01 00:51:01Z', 'failed', p_smtp_code => 554, p_smtp_text => 'no');
SELECT pg_temp.t_claim('b4', 'w', '2030-01-01 00:58Z');
-- A cancel is a decision, not an attempt.
SELECT pg_temp.t_mail('c1', 'alpha', '2030-01-01 00:00Z');
SELECT pg_temp.t_decide('c1', 'cancelled', 'cancelled', 'test', '2030-01-01 00:30Z');

SELECT results_eq(
  $$SELECT split, sender, attempts, deliveries, failures, latency_p50, latency_p95, oldest_overdue, expired_leases,
           attempts_per_delivery, duplicates
    FROM mailroom._delivery_metrics('1 hour', '2030-01-01 01:00Z') WHERE split IN ('sender', 'total')$$,
  $$VALUES ('sender'::text, 'alpha'::text, 3::bigint, 2::bigint, 0::bigint, interval '6 seconds', interval '9.6 seconds',
            NULL::interval, 0::bigint, 1.50, 0::bigint),
           ('sender', 'beta', 4, 1, 1, interval '212 seconds', interval '399.2 seconds', interval '30 minutes', 1, 2.00, 1),
           ('total', NULL, 7, 3, 1, interval '7 seconds', interval '358.5 seconds', interval '30 minutes', 1, 1.67, 1)$$,
  'per sender and in total: attempts (the one in flight too), deliveries, failures, latency percentiles, overdue age, expired leases, attempts per delivery, duplicates');

-- Recipient time zones: contents.recipient_zone (campaign mail) or the zone
-- of the schedule that made the mail.
UPDATE mailroom.contents SET recipient_zone = 'Europe/Berlin' WHERE delivery_key IN ('a1', 'b3');
SELECT results_eq(
  $$SELECT time_zone, deliveries, oldest_overdue FROM mailroom._delivery_metrics('1 hour', '2030-01-01 01:00Z')
    WHERE split = 'time_zone'$$,
  $$VALUES ('Europe/Berlin'::text, 1::bigint, interval '30 minutes'), (NULL, 2, NULL)$$,
  'split by the recipient''s time zone (NULL: unknown)');

SELECT is((SELECT deliveries FROM mailroom._delivery_metrics('10 minutes', '2030-01-01 01:00Z') WHERE split = 'total'), 0::bigint,
  'a shorter window sees none of it');
SELECT is((SELECT count(*)::int FROM mailroom._delivery_metrics('1 hour', '2031-01-01Z') WHERE split = 'total'), 1,
  'an empty window still returns the total row');
SELECT is((SELECT attempts FROM mailroom.delivery_metrics('1 hour') WHERE split = 'total'), 0::bigint,
  'the public function measures up to now()');

SELECT throws_ok($$SELECT * FROM mailroom.delivery_metrics('0 seconds')$$, '22023',
  'mailroom: window: must be more than 0 and at most 366 days, got 00:00:00', 'an empty window is refused');
SELECT throws_ok($$SELECT * FROM mailroom.delivery_metrics(NULL)$$, '22023',
  'mailroom: window: must be more than 0 and at most 366 days, got NULL', 'a NULL window is refused');
SELECT throws_ok($$SELECT * FROM mailroom._delivery_metrics('1 hour', NULL)$$, '22023',
  'mailroom: now: must not be NULL', 'a NULL now is refused');

SET LOCAL ROLE mailroom_operator;
SELECT lives_ok($$SELECT * FROM mailroom.delivery_metrics('1 hour')$$, 'an operator calls it');
RESET ROLE;
SET LOCAL ROLE mailroom_app;
SELECT throws_ok($$SELECT * FROM mailroom.delivery_metrics()$$, '42501', 'permission denied for function delivery_metrics', 'apps get 42501');
RESET ROLE;

SELECT * FROM finish();
ROLLBACK;
