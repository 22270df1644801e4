-- Tests for mailroom:reclaim
BEGIN;
SELECT plan(15);
SET LOCAL client_min_messages = warning;
TRUNCATE mailroom.queue, mailroom.contents, mailroom.attempts;
TRUNCATE mailroom.suppressions;

SELECT has_function('mailroom', 'reclaim', ARRAY['integer']);
SELECT hasnt_function('mailroom', 'reclaim', ARRAY['timestamp with time zone', 'integer'], 'the v0.3 reclaim with p_now is gone');
SELECT is_definer('mailroom', 'reclaim', ARRAY['integer']);
SELECT function_privs_are('mailroom', 'reclaim', ARRAY['integer'],
  'mailroom_runner', ARRAY['EXECUTE'], 'runners may reclaim');
SELECT function_privs_are('mailroom', 'reclaim', ARRAY['integer'],
  'mailroom_operator', ARRAY['EXECUTE'], 'operators may reclaim (as in v0.3)');
SELECT function_privs_are('mailroom', '_reclaim', ARRAY['integer', 'timestamp with time zone'],
  'mailroom_runner', ARRAY[]::text[], 'issue 13 hole 4: runners may not reclaim at a clock of their choosing');

SELECT mailroom.enqueue(k || '@example.com', 'Hi', 'B', p_delivery_key => k,
                        p_max_attempts => CASE k WHEN 'last' THEN 1 ELSE 3 END,
                        p_on_ambiguous => CASE k WHEN 'careful' THEN 'review' ELSE 'retry' END, p_send_at => '2030-01-01Z')
FROM unnest(ARRAY['bulk', 'careful', 'last']) AS k;
CREATE TEMP TABLE c AS SELECT * FROM mailroom._claim_batch('dead-worker', 3, '1 minute', NULL, '2030-01-01 00:00Z');

SELECT is(mailroom._reclaim(10000, '2030-01-01 00:00:59Z'), 0, 'live leases are left alone');
SELECT is(mailroom._reclaim(10000, '2030-01-01 00:01:01Z'), 3, 'expired leases are reclaimed');
SELECT results_eq($$SELECT delivery_key, status, status_reason, run_at FROM mailroom.messages ORDER BY delivery_key$$,
  $$VALUES ('bulk'::text, 'queued'::text, 'lease expired'::text, '2030-01-01 00:01:01Z'::timestamptz),
           ('careful', 'review', 'lease expired', '2030-01-01Z'),
           ('last', 'failed', 'attempts exhausted', NULL)$$,
  'retry policy: queued now; review policy: review; attempts spent: failed');
SELECT results_eq($$SELECT c.delivery_key, a.finished_as, a.status_reason FROM mailroom.attempts a JOIN mailroom.contents c ON c.id = a.message_id
                    WHERE a.finished_as IS NOT NULL$$,
  $$VALUES ('last'::text, 'failed'::text, 'attempts exhausted'::text)$$,
  'failed past max_attempts: the expired row finishes the mail, which leaves the hot queue');
SELECT is((SELECT count(*)::int FROM mailroom.attempts WHERE outcome = 'expired' AND finished_at = '2030-01-01 00:01:01Z'), 3,
  'the ledger marks each attempt expired');
SELECT is((SELECT last_error FROM mailroom.messages WHERE delivery_key = 'bulk'), 'lease expired (worker dead-worker)',
  'the error names the worker that lost it');
SELECT is(mailroom._reclaim(10000, '2030-01-01 00:05Z'), 0, 'reclaim is idempotent');
SELECT is(mailroom.mark_outcome((SELECT id FROM c WHERE delivery_key = 'bulk'), (SELECT lease_token FROM c LIMIT 1), 'retry'), false,
  'an outcome from the dead worker no longer applies');
SELECT throws_ok($$SELECT mailroom.reclaim(0)$$, '22023',
  'mailroom: limit: must be between 1 and 1000000, got 0', 'limit out of range');

SELECT * FROM finish();
ROLLBACK;
