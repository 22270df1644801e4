-- Tests for mailroom:view_delivered_keys
BEGIN;
SELECT plan(9);
SET LOCAL client_min_messages = warning;
TRUNCATE mailroom.messages CASCADE;
TRUNCATE mailroom.suppressions;

SELECT has_view('mailroom', 'delivered_keys', 'delivered_keys exists');
SELECT view_owner_is('mailroom', 'delivered_keys', 'mailroom_owner', 'owned by mailroom_owner');
SELECT ok((SELECT 'security_barrier=true' = ANY (reloptions) FROM pg_class WHERE oid = 'mailroom.delivered_keys'::regclass),
  'a security barrier view');
SELECT table_privs_are('mailroom', 'delivered_keys', 'mailroom_operator', ARRAY['SELECT'], 'operators may read it');

SELECT mailroom.enqueue(k || '@example.com', 'Hi', 'B', p_delivery_key => k, p_now => '2030-01-01Z')
FROM unnest(ARRAY['done', 'failed', 'resent', 'queued']) AS k;
CREATE TEMP TABLE c1 AS SELECT * FROM mailroom.claim_batch('w1', 3, '1 minute', NULL, '2030-01-01 00:00:01Z');
SELECT mailroom.mark_outcome(id, lease_token, CASE delivery_key WHEN 'failed' THEN 'failed' ELSE 'sent' END,
                             NULL, NULL, NULL, 'P-' || delivery_key, '2030-01-01 00:00:02Z')
FROM c1 WHERE delivery_key <> 'resent';
-- 'resent': the first runner hangs, its lease expires, a second runner claims
-- it; the first runner's late "sent" arrives while the second still sends.
SELECT mailroom.reclaim('2030-01-01 00:02Z');
CREATE TEMP TABLE c2 AS SELECT * FROM mailroom.claim_batch('w2', 2, '1 minute', NULL, '2030-01-01 00:02:01Z');
SELECT mailroom.mark_outcome(id, lease_token, 'sent', NULL, NULL, NULL, 'P-late', '2030-01-01 00:02:02Z')
FROM c1 WHERE delivery_key = 'resent';

SELECT results_eq(
  $$SELECT delivery_key, status, sent_at, first_success_at, successful_attempts, provider_ids
    FROM mailroom.delivered_keys ORDER BY delivery_key$$,
  $$VALUES ('done'::text, 'sent'::text, '2030-01-01 00:00:02Z'::timestamptz, '2030-01-01 00:00:02Z'::timestamptz, 1::bigint, ARRAY['P-done']),
           ('resent', 'sending', NULL, '2030-01-01 00:02:02Z', 1, ARRAY['P-late'])$$,
  'sent keys, and a key reported sent under a lost lease while it is being sent again');

-- An operator who resolves a review as sent leaves no successful attempt.
SELECT mailroom.enqueue('rev@example.com', 'Hi', 'B', p_delivery_key => 'rev', p_on_ambiguous => 'review', p_now => '2030-01-01Z');
CREATE TEMP TABLE c3 AS SELECT * FROM mailroom.claim_batch('w3', 10, '1 minute', NULL, '2030-01-01 00:03Z');
SELECT mailroom.mark_outcome(id, lease_token, 'ambiguous', 'timeout after DATA', NULL, NULL, NULL, '2030-01-01 00:03:30Z')
FROM c3 WHERE delivery_key = 'rev';
SELECT mailroom.resolve_review((SELECT id FROM mailroom.messages WHERE delivery_key = 'rev'), 'sent', '2030-01-01 00:04Z');
SELECT results_eq($$SELECT status, successful_attempts FROM mailroom.delivered_keys WHERE delivery_key = 'rev'$$,
  $$VALUES ('sent'::text, 0::bigint)$$, 'a review resolved as sent counts as delivered, with no successful attempt');

SET LOCAL ROLE mailroom_operator;
SELECT is((SELECT count(*)::int FROM mailroom.delivered_keys), 3, 'an operator reads it');
RESET ROLE;
SET LOCAL ROLE mailroom_app;
SELECT throws_ok($$SELECT * FROM mailroom.delivered_keys$$, '42501', 'permission denied for view delivered_keys', 'apps get 42501');
RESET ROLE;
SET LOCAL ROLE mailroom_runner;
SELECT throws_ok($$SELECT * FROM mailroom.delivered_keys$$, '42501', 'permission denied for view delivered_keys', 'runners get 42501');
RESET ROLE;

SELECT * FROM finish();
ROLLBACK;
