-- Tests for mailroom:view_expired_leases
BEGIN;
SELECT plan(13);
SET LOCAL client_min_messages = warning;
\ir include/core_state.psql

SELECT has_view('mailroom', 'expired_leases', 'expired_leases exists');
SELECT view_owner_is('mailroom', 'expired_leases', 'mailroom_owner', 'owned by mailroom_owner');
SELECT ok((SELECT 'security_barrier=true' = ANY (reloptions) FROM pg_class WHERE oid = 'mailroom.expired_leases'::regclass),
  'a security barrier view');
SELECT table_privs_are('mailroom', 'expired_leases', 'mailroom_operator', ARRAY['SELECT'], 'operators may read it');
SELECT has_index('mailroom', 'attempts', 'attempts_expired_idx', ARRAY['finished_at'], 'expired attempts are indexed');

-- bulk and careful: claimed by a runner that died 10 minutes ago (1-minute
-- leases, one attempt allowed); live: claimed 5 minutes ago for an hour.
SELECT pg_temp.t_mail(k, p_max_attempts => 1, p_on_ambiguous => CASE k WHEN 'careful' THEN 'review' ELSE 'retry' END,
                      p_at => now() - interval '1 hour')
FROM unnest(ARRAY['bulk', 'careful']) AS k;
SELECT pg_temp.t_mail('live', p_at => now() - interval '1 hour');
SELECT pg_temp.t_claim(k, 'dead', now() - interval '10 minutes') FROM unnest(ARRAY['bulk', 'careful']) k;
SELECT pg_temp.t_claim('live', 'alive', now() - interval '5 minutes', '1 hour');

SELECT results_eq(
  $$SELECT attempt_id, delivery_key, to_address, worker, attempt, reclaimed, status, next_status, expired_for
    FROM mailroom.expired_leases ORDER BY delivery_key$$,
  $$VALUES (NULL::bigint, 'bulk'::text, 'bulk@example.com'::text, 'dead'::text, 1, false, 'sending'::text, 'failed'::text, interval '9 minutes'),
           (NULL, 'careful', 'careful@example.com', 'dead', 1, false, 'sending', 'review', interval '9 minutes')$$,
  'leases that ran out and wait for reclaim (queue rows, no ledger row yet), with where reclaim will move them; a live lease is not listed');

-- reclaim: bulk's attempts are spent (finished: failed), careful goes to review.
SELECT pg_temp.t_end('bulk', 'expired', now(), p_reason => 'max_attempts');
SELECT pg_temp.t_end('careful', 'expired', now(), p_reason => 'lease expired');
SELECT results_eq(
  $$SELECT delivery_key, reclaimed, status, next_status, on_ambiguous, expired_for, attempt_id IS NOT NULL
    FROM mailroom.expired_leases ORDER BY delivery_key$$,
  $$VALUES ('bulk'::text, true, 'failed'::text, 'failed'::text, 'retry'::text, interval '0', true),
           ('careful', true, 'review', 'review', 'review', interval '0', true)$$,
  'after reclaim they stay visible from the ledger, with the state the mail is in now (its finishing row or its queue row)');

-- The dead runner reports after all: the row becomes stale, expired_at its report's time.
SELECT pg_temp.t_late('careful', 'dead', now() + interval '1 minute');
SELECT results_eq($$SELECT delivery_key, reclaimed, expired_for FROM mailroom.expired_leases WHERE delivery_key = 'careful'$$,
  $$VALUES ('careful'::text, true, interval '0')$$, 'a stale report stays listed');

SELECT is((SELECT count(*)::int FROM mailroom.expired_leases WHERE expired_at > now() - interval '1 day'), 2,
  'the last day of them, the query of the runbook');
SELECT alike(pg_temp.t_plan($$SELECT * FROM mailroom.expired_leases WHERE expired_at > now() - interval '1 day'$$),
  '%attempts_expired_idx%', 'which reads the ledger through attempts_expired_idx');

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
