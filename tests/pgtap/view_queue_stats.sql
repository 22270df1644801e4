-- Tests for mailroom:view_queue_stats (and open_transactions)
BEGIN;
SELECT plan(22);
SET LOCAL client_min_messages = warning;
\ir include/core_state.psql

SELECT has_view('mailroom', 'queue_stats', 'queue_stats exists');
SELECT view_owner_is('mailroom', 'queue_stats', 'mailroom_owner', 'owned by mailroom_owner');
SELECT ok((SELECT 'security_barrier=true' = ANY (reloptions) FROM pg_class WHERE oid = 'mailroom.queue_stats'::regclass),
  'a security barrier view');
SELECT table_privs_are('mailroom', 'queue_stats', 'mailroom_operator', ARRAY['SELECT'], 'operators may read it');
SELECT has_function('mailroom', 'open_transactions', ARRAY[]::text[], 'open_transactions exists');
SELECT hasnt_function('mailroom', 'open_transactions', ARRAY['timestamp with time zone'],
  'and takes no clock parameter (an operator cannot move its ages)');
SELECT is_definer('mailroom', 'open_transactions', ARRAY[]::text[], 'open_transactions is SECURITY DEFINER');
SELECT function_privs_are('mailroom', 'open_transactions', ARRAY[]::text[],
  'mailroom_operator', ARRAY['EXECUTE'], 'operators may list open transactions');
SELECT function_privs_are('mailroom', 'open_transactions', ARRAY[]::text[],
  'mailroom_app', ARRAY[]::text[], 'apps may not');
SELECT ok(pg_has_role('mailroom_owner', 'pg_read_all_stats', 'MEMBER'),
  'mailroom_owner may read every session''s transaction start (deployed by a superuser)');

UPDATE mailroom.settings SET value = '1 hour' WHERE key = 'lease_warning_after';
SELECT pg_temp.t_mail(k, s, now() - c, now() + d, CASE WHEN k LIKE 'rev%' THEN 'review' ELSE 'retry' END)
FROM (VALUES ('a1', 'alpha', interval '-5 minutes', interval '10 minutes'),
             ('a2', 'alpha', interval '-1 minute', interval '2 minutes'),
             ('a3', 'alpha', interval '1 hour', interval '1 minute'),
             ('b1', 'beta', interval '-30 minutes', interval '30 minutes'),
             ('rev1', 'beta', interval '-30 minutes', interval '30 minutes'),
             ('g1', 'gamma', interval '-40 minutes', interval '40 minutes')) AS v(k, s, d, c);
-- beta's two mails are claimed by a runner that dies; its leases ran out 9 minutes ago.
SELECT pg_temp.t_claim(k, 'dead', now() - interval '10 minutes') FROM unnest(ARRAY['b1', 'rev1']) k;
-- gamma's one mail is sent: finished mail is not in the queue, nor in queue_stats.
SELECT pg_temp.t_claim('g1', 'w', now() - interval '20 minutes');
SELECT pg_temp.t_end('g1', 'sent', now() - interval '19 minutes', 'sent');

SELECT results_eq(
  $$SELECT sender, status, messages, due, oldest_age, oldest_due_age FROM mailroom.queue_stats WHERE kind = 'queue'$$,
  $$VALUES ('alpha'::text, 'queued'::text, 3::bigint, 2::bigint, interval '10 minutes', interval '5 minutes'),
           ('beta', 'sending', 2, 0, interval '30 minutes', NULL)$$,
  'count, due count, oldest age and oldest overdue age per sender and status, live mail only');
SELECT results_eq(
  $$SELECT warning, messages, oldest_age FROM mailroom.queue_stats WHERE kind = 'warning'$$,
  $$VALUES ('expired_leases'::text, 2::bigint, interval '9 minutes')$$,
  'leases expired for over a minute and not reclaimed: warning (reclaim is not running)');

SELECT pg_temp.t_end(k, 'expired', now(), p_reason => 'lease expired') FROM unnest(ARRAY['b1', 'rev1']) k;  -- reclaim
SELECT results_eq(
  $$SELECT warning, status, messages, oldest_age FROM mailroom.queue_stats WHERE kind = 'warning'$$,
  $$VALUES ('review_waiting'::text, 'review'::text, 1::bigint, interval '0')$$,
  'after reclaim: the expired-lease warning is gone and the review item is announced');
SELECT ok((SELECT detail LIKE '1 mail(s) wait for an operator decision%' FROM mailroom.queue_stats WHERE warning = 'review_waiting'),
  'the warning says what to do');
SELECT unalike(pg_temp.t_plan('SELECT * FROM mailroom.queue_stats'), '%attempts%', 'queue_stats never reads the ledger');

-- This test's own transaction is the long one once the threshold is tiny. It
-- wrote (a transaction id), so it pins the xmin horizon: that is the warning.
SELECT pg_sleep(0.02);
UPDATE mailroom.settings SET value = '10 milliseconds' WHERE key = 'lease_warning_after';
SELECT results_eq(
  $$SELECT warning, messages FROM mailroom.queue_stats WHERE warning IN ('xmin_horizon', 'long_transaction')$$,
  $$VALUES ('xmin_horizon'::text, 1::bigint)$$,
  'a transaction holding a transaction id for longer than lease_warning_after pins the xmin horizon (and is not also a long_transaction)');
SELECT ok((SELECT detail ~ ('pid ' || pg_backend_pid() || ' postgres') AND detail LIKE '%Vacuum cannot remove row versions%'
                  AND detail LIKE '%pg_terminate_backend(pid)%'
           FROM mailroom.queue_stats WHERE warning = 'xmin_horizon'),
  'the warning names the session, the consequence and the remedy');
SELECT ok((SELECT age > interval '10 milliseconds' AND kind = 'transaction' AND pins_horizon AND horizon_xid_age >= 0
           FROM mailroom.open_transactions() WHERE pid = pg_backend_pid()),
  'open_transactions lists it with its age and as pinning the horizon');
SELECT ok((SELECT oldest_age > interval '10 milliseconds' FROM mailroom.queue_stats WHERE warning = 'xmin_horizon'),
  'the warning carries the age of the oldest holder');

SET LOCAL ROLE mailroom_operator;
SELECT is((SELECT count(*)::int FROM mailroom.queue_stats WHERE kind = 'warning'), 2, 'an operator reads it, warnings included');
RESET ROLE;
SET LOCAL ROLE mailroom_app;
SELECT throws_ok($$SELECT * FROM mailroom.queue_stats$$, '42501', 'permission denied for view queue_stats', 'apps get 42501');
RESET ROLE;
SET LOCAL ROLE mailroom_runner;
SELECT throws_ok($$SELECT * FROM mailroom.queue_stats$$, '42501', 'permission denied for view queue_stats', 'runners get 42501');
RESET ROLE;

SELECT * FROM finish();
ROLLBACK;
