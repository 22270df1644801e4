-- Verify mailroom:send_rates on pg

BEGIN;

DO $$
BEGIN
  ASSERT mailroom._rate_sliding_remaining('{}', '{}', 5, interval '1 second', now()) = 5,
         '_rate_sliding_remaining is missing or wrong';
  ASSERT NOT pg_catalog.has_function_privilege('mailroom_runner',
           'mailroom._send_rate_available(text, integer, integer, timestamptz)', 'execute'),
         '_send_rate_available is internal';
  ASSERT NOT pg_catalog.has_function_privilege('mailroom_runner',
           'mailroom._send_rate_take(text, integer, integer, integer, timestamptz)', 'execute'),
         '_send_rate_take is internal';
END
$$;

ROLLBACK;
