-- Tests for mailroom:view_review_queue
BEGIN;
SELECT plan(10);
SET LOCAL client_min_messages = warning;
\ir include/core_state.psql

SELECT has_view('mailroom', 'review_queue', 'review_queue exists');
SELECT view_owner_is('mailroom', 'review_queue', 'mailroom_owner', 'owned by mailroom_owner');
SELECT ok((SELECT 'security_barrier=true' = ANY (reloptions) FROM pg_class WHERE oid = 'mailroom.review_queue'::regclass),
  'a security barrier view');
SELECT table_privs_are('mailroom', 'review_queue', 'mailroom_operator', ARRAY['SELECT'], 'operators may read it');

SELECT pg_temp.t_mail(k, p_subject => 'Invoice ' || k, p_on_ambiguous => 'review', p_at => now() - interval '1 hour')
FROM unnest(ARRAY['died', 'timeout', 'fine']) AS k;
SELECT pg_temp.t_claim(k, 'w1', now() - interval '30 minutes') FROM unnest(ARRAY['died', 'timeout', 'fine']) k;
SELECT pg_temp.t_end('timeout', 'ambiguous', now() - interval '29 minutes', 'ambiguous',
                     p_smtp_text => 'timeout after DATA', p_reason => 'ambiguous outcome');
SELECT pg_temp.t_end('fine', 'sent', now() - interval '29 minutes', 'sent');
SELECT pg_temp.t_end('died', 'expired', now() - interval '10 minutes', p_reason => 'lease expired');

SELECT results_eq(
  $$SELECT delivery_key, subject, status_reason, last_worker, last_reported, last_outcome, last_smtp_reply, waiting_for, reported_sent
    FROM mailroom.review_queue$$,
  $$VALUES ('timeout'::text, 'Invoice timeout'::text, 'ambiguous outcome'::text, 'w1'::text, 'ambiguous'::text, 'ambiguous'::text,
            'timeout after DATA'::text, interval '29 minutes', false),
           ('died', 'Invoice died', 'lease expired', 'w1', NULL, 'expired', NULL, interval '10 minutes', false)$$,
  'review items, longest waiting first, with the last attempt that put them there');

-- A late "sent" report on the expired attempt: visible here until it settles the item.
SELECT pg_temp.t_late('died', 'w1', now() - interval '5 minutes', p_smtp_code => 250);
SELECT results_eq($$SELECT delivery_key, last_reported, last_outcome, reported_sent FROM mailroom.review_queue WHERE delivery_key = 'died'$$,
  $$VALUES ('died'::text, 'sent'::text, 'stale'::text, true)$$, 'a runner''s late sent report shows');
-- An operator decides: the item leaves the queue (its finishing row is a decision).
SELECT pg_temp.t_decide('died', 'resolved', 'sent', 'resolved by operator', now());
SELECT results_eq($$SELECT delivery_key FROM mailroom.review_queue$$, $$VALUES ('timeout'::text)$$,
  'a resolved item is off the review queue');

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
