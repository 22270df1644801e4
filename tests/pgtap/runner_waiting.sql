-- Tests for mailroom:runner_waiting (the two-session protocol with enqueue is
-- tested in tests/test_wakeup.py: NOTIFY and locks need several sessions)
BEGIN;
SELECT plan(12);

SELECT has_function('mailroom', 'runner_waiting', ARRAY['boolean']);
SELECT has_function('mailroom', 'enqueues_settled', ARRAY[]::text[]);
SELECT is_definer('mailroom', 'runner_waiting', ARRAY['boolean']);
SELECT is_definer('mailroom', 'enqueues_settled', ARRAY[]::text[]);
SELECT function_privs_are('mailroom', 'runner_waiting', ARRAY['boolean'], 'mailroom_runner', ARRAY['EXECUTE'],
  'runners may say they wait');
SELECT function_privs_are('mailroom', 'runner_waiting', ARRAY['boolean'], 'mailroom_app', ARRAY[]::text[],
  'applications may not');

SELECT throws_ok($$SELECT mailroom.runner_waiting(NULL)$$, '22023', 'mailroom: waiting: must be true or false');
CREATE TEMP VIEW held AS
  SELECT count(*)::int AS n FROM mailroom.runner_waits WHERE pid = pg_backend_pid();
SELECT ok(mailroom.runner_waiting(true), 'a runner starts waiting');
SELECT is((SELECT n FROM held), 1, 'it says so with a row of its backend in runner_waits (no session lock anyone could hold)');
SELECT ok(mailroom.runner_waiting(false), 'and stops');
SELECT ok(NOT mailroom.runner_waiting(false), 'stopping again releases nothing (and warns about nothing)');
SELECT ok(mailroom.enqueues_settled(), 'no enqueue of another session in flight: settled');

SELECT * FROM finish();
ROLLBACK;
