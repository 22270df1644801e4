-- Tests for mailroom:view_duplicate_deliveries
BEGIN;
SELECT plan(11);
SET LOCAL client_min_messages = warning;
TRUNCATE mailroom.messages CASCADE;
TRUNCATE mailroom.suppressions;

SELECT has_view('mailroom', 'duplicate_deliveries', 'duplicate_deliveries exists');
SELECT view_owner_is('mailroom', 'duplicate_deliveries', 'mailroom_owner', 'owned by mailroom_owner');
SELECT ok((SELECT 'security_barrier=true' = ANY (reloptions) FROM pg_class WHERE oid = 'mailroom.duplicate_deliveries'::regclass),
  'a security barrier view');
SELECT table_privs_are('mailroom', 'duplicate_deliveries', 'mailroom_operator', ARRAY['SELECT'], 'operators may read it');
SELECT has_index('mailroom', 'attempts', 'attempts_doubtful_idx', ARRAY['message_id'], 'doubtful attempts are indexed');

-- twice:    runner 1 hangs past its lease, runner 2 sends, then runner 1 reports sent too.
-- maybe:    runner 1 dies (no report), runner 2 sends: the first attempt's fate is unknown.
-- timeout:  runner 1 reports a timeout after DATA (retry policy), runner 2 sends.
-- once:     runner 1 fails with 451, runner 2 sends: proven single delivery.
SELECT mailroom.enqueue(k || '@example.com', 'Hi', 'B', p_delivery_key => k, p_now => '2030-01-01Z')
FROM unnest(ARRAY['twice', 'maybe', 'timeout', 'once']) AS k;
CREATE TEMP TABLE c1 AS SELECT * FROM mailroom.claim_batch('w1', 4, '1 minute', NULL, '2030-01-01 00:00:01Z');
SELECT mailroom.mark_outcome(id, lease_token, CASE delivery_key WHEN 'timeout' THEN 'ambiguous' ELSE 'retry' END,
                             'x', NULL, NULL, NULL, '2030-01-01 00:00:30Z')
FROM c1 WHERE delivery_key IN ('timeout', 'once');
SELECT mailroom.reclaim('2030-01-01 00:02Z');
UPDATE mailroom.messages SET run_at = '2030-01-01 00:02Z' WHERE status = 'queued';
CREATE TEMP TABLE c2 AS SELECT * FROM mailroom.claim_batch('w2', 4, '1 minute', NULL, '2030-01-01 00:02:01Z');
SELECT is((SELECT count(*)::int FROM c2), 4, 'all four are claimed again');
SELECT mailroom.mark_outcome(id, lease_token, 'sent', NULL, 250, NULL, NULL, '2030-01-01 00:02:02Z') FROM c2;
SELECT mailroom.mark_outcome(id, lease_token, 'sent', NULL, 250, NULL, NULL, '2030-01-01 00:02:03Z')
FROM c1 WHERE delivery_key = 'twice';

SELECT results_eq(
  $$SELECT delivery_key, certainty, successful_attempts, unproven_attempts, workers, reports
    FROM mailroom.duplicate_deliveries ORDER BY delivery_key$$,
  $$VALUES ('maybe'::text, 'possible'::text, 1::bigint, 1::bigint, ARRAY['w1', 'w2'], ARRAY['-/expired', 'sent/sent']),
           ('timeout', 'possible', 1, 1, ARRAY['w1', 'w2'], ARRAY['ambiguous/ambiguous', 'sent/sent']),
           ('twice', 'confirmed', 2, 0, ARRAY['w1', 'w2'], ARRAY['sent/stale', 'sent/sent'])$$,
  'confirmed duplicates (two successful sends) and possible ones (a send after an unproven attempt); a proven retry is not listed');
SELECT is((SELECT duplicate FROM mailroom.attempts WHERE lease_token = (SELECT lease_token FROM c1 LIMIT 1)
             AND delivery_key = 'twice'), true, 'the ledger flags the second successful send as a duplicate');

SET LOCAL ROLE mailroom_operator;
SELECT is((SELECT count(*)::int FROM mailroom.duplicate_deliveries), 3, 'an operator reads it');
RESET ROLE;
SET LOCAL ROLE mailroom_app;
SELECT throws_ok($$SELECT * FROM mailroom.duplicate_deliveries$$, '42501', 'permission denied for view duplicate_deliveries', 'apps get 42501');
RESET ROLE;
SET LOCAL ROLE mailroom_runner;
SELECT throws_ok($$SELECT * FROM mailroom.duplicate_deliveries$$, '42501', 'permission denied for view duplicate_deliveries', 'runners get 42501');
RESET ROLE;

SELECT * FROM finish();
ROLLBACK;
