-- Tests for mailroom:view_review_queue
BEGIN;
SELECT plan(10);
SET LOCAL client_min_messages = warning;
TRUNCATE mailroom.messages CASCADE;
TRUNCATE mailroom.suppressions;

SELECT has_view('mailroom', 'review_queue', 'review_queue exists');
SELECT view_owner_is('mailroom', 'review_queue', 'mailroom_owner', 'owned by mailroom_owner');
SELECT ok((SELECT 'security_barrier=true' = ANY (reloptions) FROM pg_class WHERE oid = 'mailroom.review_queue'::regclass),
  'a security barrier view');
SELECT table_privs_are('mailroom', 'review_queue', 'mailroom_operator', ARRAY['SELECT'], 'operators may read it');

SELECT mailroom.enqueue(k || '@example.com', 'Invoice ' || k, 'B', p_delivery_key => k, p_on_ambiguous => 'review',
                        p_now => now() - interval '1 hour')
FROM unnest(ARRAY['died', 'timeout', 'fine']) AS k;
CREATE TEMP TABLE c AS SELECT * FROM mailroom.claim_batch('w1', 3, '1 minute', NULL, now() - interval '30 minutes');
SELECT mailroom.mark_outcome(id, lease_token, CASE delivery_key WHEN 'timeout' THEN 'ambiguous' ELSE 'sent' END,
                             'timeout after DATA', NULL, NULL, NULL, now() - interval '29 minutes')
FROM c WHERE delivery_key <> 'died';
SELECT mailroom.reclaim(now() - interval '10 minutes');

SELECT results_eq(
  $$SELECT delivery_key, subject, status_reason, last_worker, last_reported, last_outcome, last_smtp_reply, waiting_for, reported_sent
    FROM mailroom.review_queue$$,
  $$VALUES ('timeout'::text, 'Invoice timeout'::text, 'ambiguous outcome'::text, 'w1'::text, 'ambiguous'::text, 'ambiguous'::text,
            'timeout after DATA'::text, interval '29 minutes', false),
           ('died', 'Invoice died', 'lease expired', 'w1', NULL, 'expired', NULL, interval '10 minutes', false)$$,
  'review items, longest waiting first, with the last attempt that put them there');
SELECT is((SELECT count(*)::int FROM mailroom.claim_batch('w2', 10)), 0, 'nothing in review is claimed again');

-- A late report that the mail did go out settles it.
SELECT mailroom.mark_outcome(id, lease_token, 'sent', NULL, 250, NULL, NULL, now()) FROM c WHERE delivery_key = 'died';
SELECT results_eq($$SELECT delivery_key FROM mailroom.review_queue$$, $$VALUES ('timeout'::text)$$,
  'a late sent report takes the item off the review queue');

SET LOCAL ROLE mailroom_operator;
SELECT is((SELECT count(*)::int FROM mailroom.review_queue), 1, 'an operator reads it');
RESET ROLE;
SET LOCAL ROLE mailroom_app;
SELECT throws_ok($$SELECT * FROM mailroom.review_queue$$, '42501', 'permission denied for view review_queue', 'apps get 42501');
RESET ROLE;
SET LOCAL ROLE mailroom_runner;
SELECT throws_ok($$SELECT * FROM mailroom.review_queue$$, '42501', 'permission denied for view review_queue', 'runners get 42501');
RESET ROLE;

SELECT * FROM finish();
ROLLBACK;
