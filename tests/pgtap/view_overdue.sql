-- Tests for mailroom:view_overdue
BEGIN;
SELECT plan(12);
SET LOCAL client_min_messages = warning;
TRUNCATE mailroom.messages CASCADE;
TRUNCATE mailroom.suppressions;

SELECT has_view('mailroom', 'overdue', 'overdue exists');
SELECT view_owner_is('mailroom', 'overdue', 'mailroom_owner', 'owned by mailroom_owner');
SELECT ok((SELECT 'security_barrier=true' = ANY (reloptions) FROM pg_class WHERE oid = 'mailroom.overdue'::regclass),
  'a security barrier view');
SELECT table_privs_are('mailroom', 'overdue', 'mailroom_operator', ARRAY['SELECT'], 'operators may read it');
SELECT table_privs_are('mailroom', 'overdue', 'mailroom_app', ARRAY[]::text[], 'apps may not');

SELECT mailroom.enqueue(k || '@example.com', 'Hi', 'B', p_delivery_key => k, p_send_at => now() + d, p_now => now() - interval '1 hour')
FROM (VALUES ('old', interval '-10 minutes'), ('new', interval '-1 minute'), ('future', interval '1 hour'),
             ('claimed', interval '-20 minutes')) AS v(k, d);
SELECT count(*) FROM mailroom.claim_batch('w', 1, '1 minute', NULL, now() - interval '15 minutes');

SELECT results_eq($$SELECT delivery_key, overdue_for FROM mailroom.overdue$$,
  $$VALUES ('old'::text, interval '10 minutes'), ('new', interval '1 minute')$$,
  'due, unclaimed mail, oldest first, with how long it is overdue (not future, not claimed)');

SET LOCAL ROLE mailroom_operator;
SELECT is((SELECT count(*)::int FROM mailroom.overdue), 2, 'an operator reads it');
RESET ROLE;

SET LOCAL ROLE mailroom_app;
SELECT throws_ok($$SELECT * FROM mailroom.overdue$$, '42501', 'permission denied for view overdue', 'apps get 42501');
RESET ROLE;
SET LOCAL ROLE mailroom_runner;
SELECT throws_ok($$SELECT * FROM mailroom.overdue$$, '42501', 'permission denied for view overdue', 'runners get 42501');
RESET ROLE;

-- A claim drains it.
SELECT is((SELECT count(*)::int FROM mailroom.claim_batch('w2', 10, '1 minute')), 2, 'a runner claims the overdue mail');
SELECT is((SELECT count(*)::int FROM mailroom.overdue), 0, 'and the view is empty');
SELECT is((SELECT count(*)::int FROM mailroom.messages WHERE delivery_key = 'future' AND status = 'queued'), 1,
  'mail not yet due stays queued');

SELECT * FROM finish();
ROLLBACK;
