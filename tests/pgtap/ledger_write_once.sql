-- The ledger is written once per attempt, when the attempt ends (v0.3.0,
-- kept in v0.4): a claim writes no row, the lease lives on the queue row,
-- and mark_outcomes, reclaim and release insert the attempt's row. A mail
-- that finishes leaves the hot queue and its finishing row says how
-- (finished_as); a late report completes the row its lease's end wrote.
-- (The operator views that read attempts in flight are core-read's; their
-- tests live with them.)
BEGIN;
SELECT plan(16);
SET LOCAL client_min_messages = warning;
TRUNCATE mailroom.queue, mailroom.contents, mailroom.attempts;
TRUNCATE mailroom.suppressions;

SELECT mailroom.enqueue(k || '@example.com', 'Hi', 'B', p_delivery_key => k, p_sender => 'lw', p_send_at => '2030-01-01Z')
FROM unnest(ARRAY['a', 'b', 'c', 'd']) AS k;
CREATE TEMP TABLE k AS SELECT delivery_key AS k, id FROM mailroom.contents;
CREATE TEMP TABLE c1 AS SELECT * FROM mailroom._claim_batch('w-1', 4, '5 minutes', 'lw', '2030-01-01 00:01Z');

-- In flight: nothing in the ledger, the lease on the queue row.
SELECT is((SELECT count(*)::int FROM mailroom.attempts), 0, 'claiming four mails writes no ledger row');
SELECT is((SELECT count(*)::int FROM mailroom.queue WHERE status = 'sending' AND worker = 'w-1'), 4,
  'the four leases are on their queue rows');

-- Outcomes: one row each, with the claim's facts from the queue row.
SELECT is(mailroom._mark_outcomes((SELECT jsonb_agg(jsonb_build_object('id', id, 'token', lease_token, 'outcome',
            CASE delivery_key WHEN 'a' THEN 'sent' ELSE 'retry' END, 'smtp_code', 250)) FROM c1 WHERE delivery_key IN ('a', 'b')),
          '2030-01-01 00:02Z'), 2, 'two outcomes applied');
SELECT results_eq(
  $$SELECT k.k, a.attempt, a.worker, a.claimed_at, a.finished_at, a.reported_at, a.reported, a.outcome, a.smtp_code::int,
           a.duplicate, a.finished_as
    FROM mailroom.attempts a JOIN k ON k.id = a.message_id ORDER BY k.k$$,
  $$VALUES ('a'::text, 1, 'w-1'::text, '2030-01-01 00:01Z'::timestamptz, '2030-01-01 00:02Z'::timestamptz,
            '2030-01-01 00:02Z'::timestamptz, 'sent'::text, 'sent'::text, 250, false, 'sent'::text),
           ('b', 1, 'w-1', '2030-01-01 00:01Z', '2030-01-01 00:02Z', '2030-01-01 00:02Z', 'retry', 'retry', 250, false, NULL)$$,
  'each report writes its attempt once: claim time and worker from the lease, outcome and reply from the report; the sent one finishes its mail');
SELECT is((SELECT count(*)::int FROM mailroom.queue q JOIN k ON k.id = q.id WHERE k.k = 'a'), 0,
  'the sent mail has left the hot queue');
SELECT is(mailroom._mark_outcomes((SELECT jsonb_agg(jsonb_build_object('id', id, 'token', lease_token, 'outcome', 'sent'))
                                  FROM c1 WHERE delivery_key = 'a'), '2030-01-01 00:03Z'), 0,
  'a repeated report applies nothing');
SELECT is((SELECT count(*)::int FROM mailroom.attempts), 2, '... and writes no second row');

-- Release: the row says released, with the attempt number the claim had.
SELECT is(mailroom._release(ARRAY(SELECT id FROM c1 WHERE delivery_key = 'c'), (SELECT lease_token FROM c1 LIMIT 1),
                           '2030-01-01 00:02:30Z'), 1, 'one mail released');
SELECT results_eq($$SELECT a.attempt, a.outcome, a.claimed_at, a.finished_at FROM mailroom.attempts a JOIN k ON k.id = a.message_id WHERE k.k = 'c'$$,
  $$VALUES (1, 'released'::text, '2030-01-01 00:01Z'::timestamptz, '2030-01-01 00:02:30Z'::timestamptz)$$,
  'release writes the released attempt');

-- b is due again after its retry, c after its release.
CREATE TEMP TABLE c2 AS SELECT * FROM mailroom._claim_batch('w-2', 10, '1 minute', 'lw', '2030-01-01 01:00Z');
SELECT results_eq($$SELECT delivery_key, attempt FROM c2 ORDER BY delivery_key$$,
  $$VALUES ('b'::text, 2), ('c', 1)$$, 'the retried and the released mail are claimed again (the release did not count)');

-- d's lease (from c1) expired at 00:06.
SELECT is(mailroom._reclaim(10000, '2030-01-01 00:07Z'), 1, 'reclaim returns d');
SELECT results_eq($$SELECT a.attempt, a.worker, a.claimed_at, a.finished_at, a.outcome, a.reported FROM mailroom.attempts a JOIN k ON k.id = a.message_id WHERE k.k = 'd'$$,
  $$VALUES (1, 'w-1'::text, '2030-01-01 00:01Z'::timestamptz, '2030-01-01 00:07Z'::timestamptz, 'expired'::text, NULL::text)$$,
  'reclaim writes the expired attempt');
SELECT is(mailroom._mark_outcomes((SELECT jsonb_agg(jsonb_build_object('id', id, 'token', lease_token, 'outcome', 'retry'))
                                  FROM c1 WHERE delivery_key = 'd'), '2030-01-01 00:08Z'), 0, 'a late report applies nothing');
SELECT results_eq($$SELECT count(*)::int, min(a.outcome), min(a.reported), min(a.reported_at) FROM mailroom.attempts a JOIN k ON k.id = a.message_id WHERE k.k = 'd'$$,
  $$VALUES (1, 'stale'::text, 'retry'::text, '2030-01-01 00:08Z'::timestamptz)$$,
  'a late report completes the row reclaim wrote (stale) instead of writing another');
SELECT is((SELECT count(*)::int FROM mailroom.attempts WHERE outcome IS NULL), 0, 'no open ledger row exists');
SELECT is((SELECT count(*)::int FROM mailroom.contents c
           WHERE (SELECT count(*) FROM mailroom.queue q WHERE q.id = c.id)
               + (SELECT count(*) FROM mailroom.attempts f WHERE f.message_id = c.id AND f.finished_as IS NOT NULL) <> 1), 0,
  'every mail is either live (a queue row) or finished (one finishing row)');

SELECT * FROM finish();
ROLLBACK;
