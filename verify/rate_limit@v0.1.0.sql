-- Verify mailroom:rate_limit on pg

BEGIN;

DO $$
BEGIN
  ASSERT pg_catalog.has_function_privilege('mailroom_app', 'mailroom.rate_limit(text, integer, interval, timestamptz)', 'execute'),
         'mailroom_app cannot execute rate_limit';
  ASSERT NOT pg_catalog.has_function_privilege('mailroom_app', 'mailroom._rate_check_args(text, integer, interval)', 'execute'),
         '_rate_check_args is internal';
END
$$;

ROLLBACK;
