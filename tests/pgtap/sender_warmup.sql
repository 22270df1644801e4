-- Tests for mailroom:sender_warmup
BEGIN;
SELECT plan(9);
SET LOCAL client_min_messages = warning;

SELECT has_function('mailroom', 'set_sender_warmup', ARRAY['text', 'integer[]', 'date'], 'set_sender_warmup exists');
SELECT is_definer('mailroom', 'set_sender_warmup', ARRAY['text', 'integer[]', 'date'], 'set_sender_warmup is SECURITY DEFINER');
SELECT function_privs_are('mailroom', 'set_sender_warmup', ARRAY['text', 'integer[]', 'date'], 'mailroom_runner', ARRAY[]::text[],
  'runners do not set warm-ups');

SELECT mailroom.set_sender_warmup('news', ARRAY[5, 10, 20], (now() AT TIME ZONE 'UTC')::date - 1);
SELECT results_eq($$SELECT day, days, budget, used, remaining, done FROM mailroom.sender_warmup_status()$$,
  $$VALUES (2, 3, 10, 0, 10, false)$$, 'a schedule started yesterday is on day 2 with its budget');
SELECT is((SELECT broadcast_remaining FROM mailroom.sender_warmup_status()), 9, 'broadcast may use all but the 10 % reserve');
SELECT mailroom.set_sender_warmup('news', ARRAY[5, 10, 20], (now() AT TIME ZONE 'UTC')::date - 3);
SELECT is((SELECT done FROM mailroom.sender_warmup_status()), true, 'past the ramp the warm-up is over');

SELECT throws_ok($$SELECT mailroom.set_sender_warmup('news', ARRAY[5, -1])$$, '22023',
  'mailroom: ramp: every daily budget must be a number from 1 to 100000000, got {5,-1}', 'a negative budget is refused');
SELECT is((SELECT ramp FROM mailroom.sender_warmups), ARRAY[5, 10, 20], 'and the schedule is unchanged');
SELECT is(mailroom.clear_sender_warmup('news'), true, 'a warm-up is cleared');

SELECT * FROM finish();
ROLLBACK;
