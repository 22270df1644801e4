-- Tests for mailroom:view_expired_leases
BEGIN;
SELECT plan(11);
SET LOCAL client_min_messages = warning;
TRUNCATE mailroom.messages CASCADE;
TRUNCATE mailroom.suppressions;

SELECT has_view('mailroom', 'expired_leases', 'expired_leases exists');
SELECT view_owner_is('mailroom', 'expired_leases', 'mailroom_owner', 'owned by mailroom_owner');
SELECT ok((SELECT 'security_barrier=true' = ANY (reloptions) FROM pg_class WHERE oid = 'mailroom.expired_leases'::regclass),
  'a security barrier view');
SELECT table_privs_are('mailroom', 'expired_leases', 'mailroom_operator', ARRAY['SELECT'], 'operators may read it');
SELECT has_index('mailroom', 'attempts', 'attempts_expired_idx', ARRAY['finished_at'], 'expired attempts are indexed');

SELECT mailroom.enqueue(k || '@example.com', 'Hi', 'B', p_delivery_key => k, p_max_attempts => 1,
                        p_on_ambiguous => CASE k WHEN 'careful' THEN 'review' ELSE 'retry' END,
                        p_now => now() - interval '1 hour')
FROM unnest(ARRAY['bulk', 'careful']) AS k;
SELECT mailroom.enqueue('live@example.com', 'Hi', 'B', p_delivery_key => 'live', p_now => now() - interval '1 hour');
SELECT count(*) FROM mailroom.claim_batch('dead', 2, '1 minute', NULL, now() - interval '10 minutes');
SELECT count(*) FROM mailroom.claim_batch('alive', 1, '1 hour', NULL, now() - interval '5 minutes');

SELECT results_eq(
  $$SELECT delivery_key, worker, reclaimed, status, next_status, expired_for FROM mailroom.expired_leases ORDER BY delivery_key$$,
  $$VALUES ('bulk'::text, 'dead'::text, false, 'sending'::text, 'failed'::text, interval '9 minutes'),
           ('careful', 'dead', false, 'sending', 'review', interval '9 minutes')$$,
  'leases that ran out and wait for reclaim, with where reclaim will move them; a live lease is not listed');

SELECT is(mailroom.reclaim(), 2, 'reclaim takes both');
SELECT results_eq(
  $$SELECT delivery_key, reclaimed, status, expired_for FROM mailroom.expired_leases ORDER BY delivery_key$$,
  $$VALUES ('bulk'::text, true, 'failed'::text, interval '0'), ('careful', true, 'review', interval '0')$$,
  'after reclaim they stay visible from the ledger, with the status they moved to');

SET LOCAL ROLE mailroom_operator;
SELECT is((SELECT count(*)::int FROM mailroom.expired_leases), 2, 'an operator reads it');
RESET ROLE;
SET LOCAL ROLE mailroom_app;
SELECT throws_ok($$SELECT * FROM mailroom.expired_leases$$, '42501', 'permission denied for view expired_leases', 'apps get 42501');
RESET ROLE;
SET LOCAL ROLE mailroom_runner;
SELECT throws_ok($$SELECT * FROM mailroom.expired_leases$$, '42501', 'permission denied for view expired_leases', 'runners get 42501');
RESET ROLE;

SELECT * FROM finish();
ROLLBACK;
