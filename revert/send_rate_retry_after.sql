-- Revert mailroom:send_rate_retry_after from pg (back to v0.3.0: p_now on the public function)

BEGIN;

DROP FUNCTION mailroom.send_rate_retry_after(text);
ALTER FUNCTION mailroom._send_rate_retry_after(text, timestamptz) RENAME TO send_rate_retry_after;
GRANT EXECUTE ON FUNCTION mailroom.send_rate_retry_after(text, timestamptz) TO mailroom_runner;
COMMENT ON FUNCTION mailroom.send_rate_retry_after(text, timestamptz) IS
  'For runners whose claim came back short: NULL when no send-rate budget is exhausted (the queue is just empty: idle as usual); otherwise how long until the first exhausted budget (p_sender''s own if it is exhausted, else any limited sender''s or domain''s) allows more. Claim again after that instead of the full poll interval.';

COMMIT;
