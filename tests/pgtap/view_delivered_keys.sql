-- Tests for mailroom:view_delivered_keys
BEGIN;
SELECT plan(10);
SET LOCAL client_min_messages = warning;
\ir include/core_state.psql

SELECT has_view('mailroom', 'delivered_keys', 'delivered_keys exists');
SELECT view_owner_is('mailroom', 'delivered_keys', 'mailroom_owner', 'owned by mailroom_owner');
SELECT ok((SELECT 'security_barrier=true' = ANY (reloptions) FROM pg_class WHERE oid = 'mailroom.delivered_keys'::regclass),
  'a security barrier view');
SELECT table_privs_are('mailroom', 'delivered_keys', 'mailroom_operator', ARRAY['SELECT'], 'operators may read it');

SELECT pg_temp.t_mail(k, p_at => '2030-01-01Z') FROM unnest(ARRAY['done', 'failed', 'resent', 'queued']) AS k;
SELECT pg_temp.t_claim(k, 'w1', '2030-01-01 00:00:01Z') FROM unnest(ARRAY['done', 'failed', 'resent']) k;
SELECT pg_temp.t_end('done', 'sent', '2030-01-01 00:00:02Z', 'sent', p_provider => 'P-done');
SELECT pg_temp.t_end('failed', 'failed', '2030-01-01 00:00:02Z', 'failed', p_provider => 'P-failed');
-- 'resent': the first runner hangs, its lease expires, a second runner claims
-- it; the first runner's late "sent" arrives while the second still sends.
SELECT pg_temp.t_end('resent', 'expired', '2030-01-01 00:02Z');
SELECT pg_temp.t_claim('resent', 'w2', '2030-01-01 00:02:01Z');
SELECT pg_temp.t_late('resent', 'w1', '2030-01-01 00:02:02Z', p_provider => 'P-late');

SELECT results_eq(
  $$SELECT delivery_key, status, sent_at, first_success_at, successful_attempts, provider_ids
    FROM mailroom.delivered_keys ORDER BY delivery_key$$,
  $$VALUES ('done'::text, 'sent'::text, '2030-01-01 00:00:02Z'::timestamptz, '2030-01-01 00:00:02Z'::timestamptz, 1::bigint, ARRAY['P-done']),
           ('resent', 'sending', NULL, '2030-01-01 00:02:02Z', 1, ARRAY['P-late'])$$,
  'sent keys, and a key reported sent under a lost lease while it is being sent again');

-- An operator who resolves a review as sent leaves no successful attempt.
SELECT pg_temp.t_mail('rev', p_on_ambiguous => 'review', p_at => '2030-01-01Z');
SELECT pg_temp.t_claim('rev', 'w3', '2030-01-01 00:03Z');
SELECT pg_temp.t_end('rev', 'ambiguous', '2030-01-01 00:03:30Z', 'ambiguous', p_smtp_text => 'timeout after DATA',
                     p_reason => 'ambiguous outcome');
SELECT pg_temp.t_decide('rev', 'resolved', 'sent', 'resolved by operator', '2030-01-01 00:04Z');
SELECT results_eq($$SELECT status, status_reason, sent_at, successful_attempts FROM mailroom.delivered_keys WHERE delivery_key = 'rev'$$,
  $$VALUES ('sent'::text, 'resolved by operator'::text, '2030-01-01 00:04Z'::timestamptz, 0::bigint)$$,
  'a review resolved as sent counts as delivered, with no successful attempt');
SELECT alike(pg_temp.t_plan($$SELECT * FROM mailroom.delivered_keys WHERE delivery_key = 'done'$$),
  '%contents_delivery_key_unique%', 'a key is looked up through the unique index of contents');

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
