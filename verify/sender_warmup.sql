-- Verify mailroom:sender_warmup on pg

BEGIN;

SELECT sender, started_on, ramp, used_on, used, updated_at FROM mailroom.sender_warmups WHERE false;
SELECT has_function_privilege('mailroom_operator', 'mailroom.set_sender_warmup(text, integer[], date)', 'execute');
SELECT has_function_privilege('mailroom_operator', 'mailroom.clear_sender_warmup(text)', 'execute');
SELECT has_function_privilege('mailroom_operator', 'mailroom.sender_warmup_status()', 'execute');
DO $$
BEGIN
  ASSERT (mailroom.warmup_default_ramp())[1] = 50, 'the default ramp does not start at 50 a day';
  ASSERT (SELECT d.budget FROM mailroom._warmup_day(date '2026-01-01', ARRAY[5, 7], NULL, 0, date '2026-01-02') AS d) = 7,
    'day 2 does not get the ramp''s second budget';
END
$$;

ROLLBACK;
