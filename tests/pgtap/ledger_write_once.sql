-- The ledger is written once per attempt, when the attempt ends (v0.3.0): a
-- claim writes no row, the lease lives on the message, and mark_outcomes,
-- reclaim and release insert the finished row. The operator's read side
-- (inspect, delivery_metrics, repeated_attempts, expired_leases) shows the
-- attempt in flight from the message. Rows opened by a claim_batch before
-- v0.3.0 are completed, never doubled.
BEGIN;
SELECT plan(22);
SET LOCAL client_min_messages = warning;
TRUNCATE mailroom.messages CASCADE;
TRUNCATE mailroom.suppressions;

SELECT mailroom.enqueue(k || '@example.com', 'Hi', 'B', p_delivery_key => k, p_sender => 'lw', p_now => '2020-01-01Z')
FROM unnest(ARRAY['a', 'b', 'c', 'd']) AS k;
CREATE TEMP TABLE k AS SELECT delivery_key AS k, id FROM mailroom.messages;
CREATE TEMP TABLE c1 AS SELECT * FROM mailroom.claim_batch('w-1', 4, '5 minutes', 'lw', '2020-01-01 00:01Z');

-- In flight: nothing in the ledger, the lease on the message.
SELECT is((SELECT count(*)::int FROM mailroom.attempts), 0, 'claiming four mails writes no ledger row');
SELECT results_eq(
  $$SELECT e->>'id', e->>'outcome', (e->>'attempt')::int, e->>'worker', (e->>'claimed_at')::timestamptz, (e->>'lease_token')::uuid
    FROM jsonb_array_elements(mailroom.inspect('a')->'ledger') e$$,
  $$SELECT NULL::text, NULL::text, 1, 'w-1'::text, '2020-01-01 00:01Z'::timestamptz, lease_token FROM c1 WHERE delivery_key = 'a'$$,
  'inspect shows the attempt in flight from the lease on the message');
SELECT is((SELECT attempts FROM mailroom.delivery_metrics('1 hour', '2020-01-01 00:02Z') WHERE split = 'total'), 4::bigint,
  'delivery_metrics counts attempts in flight as claimed');

-- Outcomes: one row each, with the claim's facts from the message.
SELECT is(mailroom.mark_outcomes((SELECT jsonb_agg(jsonb_build_object('id', id, 'token', lease_token, 'outcome',
            CASE delivery_key WHEN 'a' THEN 'sent' ELSE 'retry' END, 'smtp_code', 250)) FROM c1 WHERE delivery_key IN ('a', 'b')),
          '2020-01-01 00:02Z'), 2, 'two outcomes applied');
SELECT results_eq(
  $$SELECT k.k, a.attempt, a.worker, a.claimed_at, a.finished_at, a.reported_at, a.reported, a.outcome, a.smtp_code::int, a.duplicate
    FROM mailroom.attempts a JOIN k ON k.id = a.message_id ORDER BY k.k$$,
  $$VALUES ('a'::text, 1, 'w-1'::text, '2020-01-01 00:01Z'::timestamptz, '2020-01-01 00:02Z'::timestamptz,
            '2020-01-01 00:02Z'::timestamptz, 'sent'::text, 'sent'::text, 250, false),
           ('b', 1, 'w-1', '2020-01-01 00:01Z', '2020-01-01 00:02Z', '2020-01-01 00:02Z', 'retry', 'retry', 250, false)$$,
  'each report writes its attempt once: claim time and worker from the lease, outcome and reply from the report');
SELECT is(mailroom.mark_outcomes((SELECT jsonb_agg(jsonb_build_object('id', id, 'token', lease_token, 'outcome', 'sent'))
                                  FROM c1 WHERE delivery_key = 'a'), '2020-01-01 00:03Z'), 0,
  'a repeated report applies nothing');
SELECT is((SELECT count(*)::int FROM mailroom.attempts), 2, '... and writes no second row');
SELECT is((SELECT jsonb_array_length(mailroom.inspect('a')->'ledger')), 1, 'inspect of sent mail shows only its ledger row');

-- Release: the row says released, with the attempt number the claim had.
SELECT is(mailroom.release(ARRAY(SELECT id FROM c1 WHERE delivery_key = 'c'), (SELECT lease_token FROM c1 LIMIT 1),
                           '2020-01-01 00:02:30Z'), 1, 'one mail released');
SELECT results_eq($$SELECT a.attempt, a.outcome, a.claimed_at, a.finished_at FROM mailroom.attempts a JOIN k ON k.id = a.message_id WHERE k.k = 'c'$$,
  $$VALUES (1, 'released'::text, '2020-01-01 00:01Z'::timestamptz, '2020-01-01 00:02:30Z'::timestamptz)$$,
  'release writes the released attempt');

-- b is due again after its retry: the second attempt is in flight.
CREATE TEMP TABLE c2 AS SELECT * FROM mailroom.claim_batch('w-2', 10, '1 minute', 'lw', '2020-01-01 01:00Z');
SELECT results_eq($$SELECT delivery_key, attempt FROM c2 ORDER BY delivery_key$$,
  $$VALUES ('b'::text, 2), ('c', 1)$$, 'the retried and the released mail are claimed again');
SELECT results_eq($$SELECT attempts, most_attempts FROM mailroom.repeated_attempts WHERE recipient = 'b@example.com'$$,
  $$VALUES (2::bigint, 2)$$, 'repeated_attempts counts the attempt in flight');

-- d's lease (from c1) expired at 00:06: expired_leases reads it from the message.
SELECT results_eq(
  $$SELECT attempt_id, worker, attempt, claimed_at, expired_at, reclaimed FROM mailroom.expired_leases WHERE delivery_key = 'd'$$,
  $$VALUES (NULL::bigint, 'w-1'::text, 1, '2020-01-01 00:01Z'::timestamptz, '2020-01-01 00:06Z'::timestamptz, false)$$,
  'an unreclaimed expired lease is listed from the message (no ledger row yet)');
SELECT is(mailroom.reclaim('2020-01-01 00:07Z'), 1, 'reclaim returns d');
SELECT results_eq($$SELECT a.attempt, a.worker, a.claimed_at, a.finished_at, a.outcome, a.reported FROM mailroom.attempts a JOIN k ON k.id = a.message_id WHERE k.k = 'd'$$,
  $$VALUES (1, 'w-1'::text, '2020-01-01 00:01Z'::timestamptz, '2020-01-01 00:07Z'::timestamptz, 'expired'::text, NULL::text)$$,
  'reclaim writes the expired attempt');
SELECT is(mailroom.mark_outcomes((SELECT jsonb_agg(jsonb_build_object('id', id, 'token', lease_token, 'outcome', 'retry'))
                                  FROM c1 WHERE delivery_key = 'd'), '2020-01-01 00:08Z'), 0, 'a late report applies nothing');
SELECT results_eq($$SELECT count(*)::int, min(a.outcome), min(a.reported), min(a.reported_at) FROM mailroom.attempts a JOIN k ON k.id = a.message_id WHERE k.k = 'd'$$,
  $$VALUES (1, 'stale'::text, 'retry'::text, '2020-01-01 00:08Z'::timestamptz)$$,
  'a late report completes the row reclaim wrote (stale) instead of writing another');

-- Rows opened at claim time by a claim_batch before v0.3.0 (a deploy while
-- runners hold leases) are completed, not doubled.
INSERT INTO mailroom.attempts (message_id, delivery_key, attempt, worker, lease_token, claimed_at)
SELECT id, delivery_key, attempt, 'w-2', lease_token, '2020-01-01 01:00Z' FROM c2;
SELECT is(mailroom.mark_outcomes((SELECT jsonb_agg(jsonb_build_object('id', id, 'token', lease_token, 'outcome', 'sent'))
                                  FROM c2 WHERE delivery_key = 'b'), '2020-01-01 01:00:10Z'), 1, 'a report for an old-style claim applies');
SELECT results_eq($$SELECT count(*)::int, min(a.outcome), min(a.finished_at) FROM mailroom.attempts a JOIN c2 USING (lease_token) WHERE c2.delivery_key = 'b' AND a.message_id = c2.id$$,
  $$VALUES (1, 'sent'::text, '2020-01-01 01:00:10Z'::timestamptz)$$, '... and completes its open row');
SELECT is(mailroom.release(ARRAY(SELECT id FROM c2 WHERE delivery_key = 'c'), (SELECT lease_token FROM c2 LIMIT 1),
                           '2020-01-01 01:00:20Z'), 1, 'an old-style claim is released');
SELECT results_eq($$SELECT count(*)::int, min(a.outcome) FROM mailroom.attempts a JOIN c2 USING (lease_token) WHERE c2.delivery_key = 'c' AND a.message_id = c2.id$$,
  $$VALUES (1, 'released'::text)$$, '... and its open row closed, not doubled');
SELECT is((SELECT count(*)::int FROM mailroom.attempts WHERE outcome IS NULL), 0, 'no open ledger row is left');

SELECT * FROM finish();
ROLLBACK;
