-- Verify mailroom:send_rate_retry_after on pg

BEGIN;

DO $$
BEGIN
  ASSERT pg_catalog.has_function_privilege('mailroom_runner', 'mailroom.send_rate_retry_after(text, timestamptz)', 'execute'),
         'mailroom_runner cannot execute send_rate_retry_after';
END
$$;

ROLLBACK;
