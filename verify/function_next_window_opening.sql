-- Verify mailroom:function_next_window_opening on pg

BEGIN;

SELECT has_function_privilege('mailroom._window_check(time, time)', 'execute');
SELECT has_function_privilege('mailroom._window_open(text, time, time, timestamptz)', 'execute');
DO $$
BEGIN
  ASSERT mailroom.next_window_opening('Europe/Berlin', '08:00', '20:00', '2026-07-01 20:30Z')
         = '2026-07-02 06:00Z', 'next_window_opening is wrong';
END
$$;

ROLLBACK;
