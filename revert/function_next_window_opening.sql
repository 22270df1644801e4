-- Revert mailroom:function_next_window_opening from pg

BEGIN;

DROP FUNCTION mailroom.next_window_opening(text, time, time, timestamptz);
DROP FUNCTION mailroom._window_open(text, time, time, timestamptz);
DROP FUNCTION mailroom._window_check(time, time);

COMMIT;
