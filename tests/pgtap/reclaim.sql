-- Tests for mailroom:reclaim
BEGIN;
SELECT plan(11);
SET LOCAL client_min_messages = warning;
TRUNCATE mailroom.messages CASCADE;
TRUNCATE mailroom.suppressions;

SELECT has_function('mailroom', 'reclaim', ARRAY['timestamp with time zone', 'integer']);
SELECT is_definer('mailroom', 'reclaim', ARRAY['timestamp with time zone', 'integer']);
SELECT function_privs_are('mailroom', 'reclaim', ARRAY['timestamp with time zone', 'integer'],
  'mailroom_runner', ARRAY['EXECUTE'], 'runners may reclaim');

SELECT mailroom.enqueue(k || '@example.com', 'Hi', 'B', p_delivery_key => k,
                        p_max_attempts => CASE k WHEN 'last' THEN 1 ELSE 3 END,
                        p_on_ambiguous => CASE k WHEN 'careful' THEN 'review' ELSE 'retry' END,
                        p_now => '2030-01-01Z')
FROM unnest(ARRAY['bulk', 'careful', 'last']) AS k;
CREATE TEMP TABLE c AS SELECT * FROM mailroom.claim_batch('dead-worker', 3, '1 minute', NULL, '2030-01-01 00:00Z');

SELECT is(mailroom.reclaim('2030-01-01 00:00:59Z'), 0, 'live leases are left alone');
SELECT is(mailroom.reclaim('2030-01-01 00:01:01Z'), 3, 'expired leases are reclaimed');
SELECT results_eq($$SELECT delivery_key, status, status_reason, run_at FROM mailroom.messages ORDER BY delivery_key$$,
  $$VALUES ('bulk'::text, 'queued'::text, 'lease expired'::text, '2030-01-01 00:01:01Z'::timestamptz),
           ('careful', 'review', 'lease expired', '2030-01-01Z'),
           ('last', 'failed', 'attempts exhausted', '2030-01-01Z')$$,
  'retry policy: queued now; review policy: review; attempts spent: failed');
SELECT is((SELECT count(*)::int FROM mailroom.attempts WHERE outcome = 'expired' AND finished_at = '2030-01-01 00:01:01Z'), 3,
  'the ledger marks each attempt expired');
SELECT is((SELECT last_error FROM mailroom.messages WHERE delivery_key = 'bulk'), 'lease expired (worker dead-worker)',
  'the error names the worker that lost it');
SELECT is(mailroom.reclaim('2030-01-01 00:05Z'), 0, 'reclaim is idempotent');
SELECT is(mailroom.mark_outcome((SELECT id FROM c WHERE delivery_key = 'bulk'), (SELECT lease_token FROM c LIMIT 1), 'retry'), false,
  'an outcome from the dead worker no longer applies');
SELECT throws_ok($$SELECT mailroom.reclaim(now(), 0)$$, '22023',
  'mailroom: limit: must be between 1 and 1000000, got 0', 'limit out of range');

SELECT * FROM finish();
ROLLBACK;
