-- Tests for mailroom:delivery_metrics
BEGIN;
SELECT plan(14);
SET LOCAL client_min_messages = warning;
TRUNCATE mailroom.messages CASCADE;
TRUNCATE mailroom.suppressions;
UPDATE mailroom.settings SET value = '1 second' WHERE key IN ('retry_backoff_base', 'retry_backoff_max');

SELECT has_function('mailroom', 'delivery_metrics', ARRAY['interval', 'timestamp with time zone'], 'delivery_metrics exists');
SELECT is_definer('mailroom', 'delivery_metrics', ARRAY['interval', 'timestamp with time zone'], 'it is SECURITY DEFINER');
SELECT function_privs_are('mailroom', 'delivery_metrics', ARRAY['interval', 'timestamp with time zone'],
  'mailroom_operator', ARRAY['EXECUTE'], 'operators may call it');
SELECT function_privs_are('mailroom', 'delivery_metrics', ARRAY['interval', 'timestamp with time zone'],
  'mailroom_runner', ARRAY[]::text[], 'runners may not');

-- Window: (00:00, 01:00]. alpha: a1 sent on the first try in 2 s; a2 retried once,
-- then sent in 10 s. beta: b1's first runner hangs (lease expires), the second
-- sends in 4 s, then the first reports sent too after 7 minutes (a duplicate);
-- b2 fails; b3 is overdue since 00:30. old: sent before the window.
SELECT mailroom.enqueue(k || '@example.com', 'Hi', 'B', p_delivery_key => k, p_sender => s, p_send_at => t::timestamptz,
                        p_now => '2029-12-31 23:00Z')
FROM (VALUES ('a1', 'alpha', '2030-01-01 00:10Z'), ('a2', 'alpha', '2030-01-01 00:20Z'),
             ('b1', 'beta', '2030-01-01 00:40Z'), ('b2', 'beta', '2030-01-01 00:50Z'),
             ('b3', 'beta', '2031-01-01Z'), ('old', 'alpha', '2029-12-31 23:00Z')) AS v(k, s, t);
CREATE TEMP TABLE c0 AS SELECT * FROM mailroom.claim_batch('w', 1, '1 minute', NULL, '2029-12-31 23:00Z');
SELECT mailroom.mark_outcome(id, lease_token, 'sent', NULL, NULL, NULL, NULL, '2029-12-31 23:00:01Z') FROM c0;
CREATE TEMP TABLE c1 AS SELECT * FROM mailroom.claim_batch('w', 1, '1 minute', NULL, '2030-01-01 00:10Z');
SELECT mailroom.mark_outcome(id, lease_token, 'sent', NULL, NULL, NULL, NULL, '2030-01-01 00:10:02Z') FROM c1;
CREATE TEMP TABLE c2 AS SELECT * FROM mailroom.claim_batch('w', 1, '1 minute', NULL, '2030-01-01 00:20Z');
SELECT mailroom.mark_outcome(id, lease_token, 'retry', NULL, NULL, NULL, NULL, '2030-01-01 00:20:01Z') FROM c2;
CREATE TEMP TABLE c3 AS SELECT * FROM mailroom.claim_batch('w', 1, '1 minute', NULL, '2030-01-01 00:25Z');
SELECT mailroom.mark_outcome(id, lease_token, 'sent', NULL, NULL, NULL, NULL, '2030-01-01 00:25:10Z') FROM c3;
CREATE TEMP TABLE c4 AS SELECT * FROM mailroom.claim_batch('w', 1, '1 minute', 'beta', '2030-01-01 00:40Z');
SELECT mailroom.reclaim('2030-01-01 00:45Z');
CREATE TEMP TABLE c5 AS SELECT * FROM mailroom.claim_batch('w', 1, '1 minute', 'beta', '2030-01-01 00:46Z');
SELECT is((SELECT delivery_key || ' ' || attempt FROM c5), 'b1 2', 'b1 is claimed again by the second runner');
SELECT mailroom.mark_outcome(id, lease_token, 'sent', NULL, NULL, NULL, NULL, '2030-01-01 00:46:04Z') FROM c5;
SELECT mailroom.mark_outcome(id, lease_token, 'sent', NULL, NULL, NULL, NULL, '2030-01-01 00:47Z') FROM c4;
CREATE TEMP TABLE c6 AS SELECT * FROM mailroom.claim_batch('w', 1, '1 minute', 'beta', '2030-01-01 00:51Z');
SELECT mailroom.mark_outcome(id, lease_token, 'failed', 'no', 554, '5.7.1', NULL, '2030-01-01 00:51:01Z') FROM c6;
UPDATE mailroom.messages SET run_at = '2030-01-01 00:30Z' WHERE delivery_key = 'b3';

SELECT results_eq(
  $$SELECT split, sender, attempts, deliveries, failures, latency_p50, latency_p95, oldest_overdue, expired_leases,
           attempts_per_delivery, duplicates
    FROM mailroom.delivery_metrics('1 hour', '2030-01-01 01:00Z') WHERE split IN ('sender', 'total')$$,
  $$VALUES ('sender'::text, 'alpha'::text, 3::bigint, 2::bigint, 0::bigint, interval '6 seconds', interval '9.6 seconds',
            NULL::interval, 0::bigint, 1.50, 0::bigint),
           ('sender', 'beta', 3, 1, 1, interval '212 seconds', interval '399.2 seconds', interval '30 minutes', 1, 2.00, 1),
           ('total', NULL, 6, 3, 1, interval '7 seconds', interval '358.5 seconds', interval '30 minutes', 1, 1.67, 1)$$,
  'per sender and in total: attempts, deliveries, failures, latency percentiles, overdue age, expired leases, attempts per delivery, duplicates');

-- Recipient time zones: messages.recipient_zone (from the campaigns change)
-- or the zone of the schedule that made the mail. Where neither change is
-- deployed, a stand-in schedules table shows the lookup.
DO $$
BEGIN
  IF EXISTS (SELECT FROM pg_attribute WHERE attrelid = 'mailroom.messages'::regclass AND attname = 'recipient_zone') THEN
    EXECUTE $u$UPDATE mailroom.messages SET recipient_zone = 'Europe/Berlin' WHERE delivery_key IN ('a1', 'b3')$u$;
  ELSIF to_regclass('mailroom.schedules') IS NULL THEN
    CREATE TABLE mailroom.schedules (id bigint PRIMARY KEY, time_zone text NOT NULL);
    ALTER TABLE mailroom.schedules OWNER TO mailroom_owner;
    INSERT INTO mailroom.schedules VALUES (1, 'Europe/Berlin');
    UPDATE mailroom.messages SET schedule_id = 1 WHERE delivery_key IN ('a1', 'b3');
  END IF;
END
$$;
SELECT results_eq(
  $$SELECT time_zone, deliveries, oldest_overdue FROM mailroom.delivery_metrics('1 hour', '2030-01-01 01:00Z')
    WHERE split = 'time_zone'$$,
  $$VALUES ('Europe/Berlin'::text, 1::bigint, interval '30 minutes'), (NULL, 2, NULL)$$,
  'split by the recipient''s time zone (NULL: unknown)');

SELECT is((SELECT deliveries FROM mailroom.delivery_metrics('10 minutes', '2030-01-01 01:00Z') WHERE split = 'total'), 0::bigint,
  'a shorter window sees none of it');
SELECT is((SELECT count(*)::int FROM mailroom.delivery_metrics('1 hour', '2031-01-01Z') WHERE split = 'total'), 1,
  'an empty window still returns the total row');

SELECT throws_ok($$SELECT * FROM mailroom.delivery_metrics('0 seconds')$$, '22023',
  'mailroom: window: must be more than 0 and at most 366 days, got 00:00:00', 'an empty window is refused');
SELECT throws_ok($$SELECT * FROM mailroom.delivery_metrics(NULL)$$, '22023',
  'mailroom: window: must be more than 0 and at most 366 days, got NULL', 'a NULL window is refused');
SELECT throws_ok($$SELECT * FROM mailroom.delivery_metrics('1 hour', NULL)$$, '22023',
  'mailroom: now: must not be NULL', 'a NULL now is refused');

SET LOCAL ROLE mailroom_operator;
SELECT is((SELECT attempts FROM mailroom.delivery_metrics('1 hour', '2030-01-01 01:00Z') WHERE split = 'total'), 6::bigint,
  'an operator calls it');
RESET ROLE;
SET LOCAL ROLE mailroom_app;
SELECT throws_ok($$SELECT * FROM mailroom.delivery_metrics()$$, '42501', 'permission denied for function delivery_metrics', 'apps get 42501');
RESET ROLE;

SELECT * FROM finish();
ROLLBACK;
