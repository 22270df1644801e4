-- Tests for mailroom:view_overdue
BEGIN;
SELECT plan(12);
SET LOCAL client_min_messages = warning;
\ir include/core_state.psql

SELECT has_view('mailroom', 'overdue', 'overdue exists');
SELECT view_owner_is('mailroom', 'overdue', 'mailroom_owner', 'owned by mailroom_owner');
SELECT ok((SELECT 'security_barrier=true' = ANY (reloptions) FROM pg_class WHERE oid = 'mailroom.overdue'::regclass),
  'a security barrier view');
SELECT table_privs_are('mailroom', 'overdue', 'mailroom_operator', ARRAY['SELECT'], 'operators may read it');
SELECT table_privs_are('mailroom', 'overdue', 'mailroom_app', ARRAY[]::text[], 'apps may not');

SELECT pg_temp.t_mail(k, p_at => now() - interval '1 hour', p_run_at => now() + d)
FROM (VALUES ('old', interval '-10 minutes'), ('new', interval '-1 minute'), ('future', interval '1 hour'),
             ('claimed', interval '-20 minutes'), ('done', interval '-30 minutes')) AS v(k, d);
SELECT pg_temp.t_claim(k, 'w', now() - interval '15 minutes') FROM unnest(ARRAY['claimed', 'done']) k;
SELECT pg_temp.t_end('done', 'sent', now() - interval '14 minutes', 'sent');

SELECT results_eq($$SELECT delivery_key, overdue_for, to_address, created_at FROM mailroom.overdue$$,
  $$VALUES ('old'::text, interval '10 minutes', 'old@example.com'::text, now() - interval '1 hour'),
           ('new', interval '1 minute', 'new@example.com', now() - interval '1 hour')$$,
  'due, unclaimed mail, oldest first, with how long it is overdue and its content (not future, not claimed, not finished)');

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
SELECT pg_temp.t_claim(k, 'w2', now()) FROM unnest(ARRAY['old', 'new']) k;
SELECT is((SELECT count(*)::int FROM mailroom.overdue), 0, 'claimed mail leaves the view');
SELECT is((SELECT count(*)::int FROM mailroom.queue WHERE id = pg_temp.t_id('future') AND status = 'queued'), 1,
  'mail not yet due stays queued');

-- History is not read: the plan touches the queue and contents only.
SELECT unalike(pg_temp.t_plan('SELECT * FROM mailroom.overdue'), '%attempts%', 'the ledger is not read');

SELECT * FROM finish();
ROLLBACK;
