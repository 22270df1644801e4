-- Verify mailroom:rate_limit_sliding on pg

BEGIN;

DO $$
BEGIN
  ASSERT pg_catalog.has_function_privilege('mailroom_app', 'mailroom.rate_limit_sliding(text, integer, interval, timestamptz)', 'execute'),
         'mailroom_app cannot execute rate_limit_sliding';
  ASSERT NOT pg_catalog.has_function_privilege('mailroom_app', 'mailroom._rate_sliding_take(text, integer, integer, interval, timestamptz)', 'execute'),
         '_rate_sliding_take is internal';
END
$$;

ROLLBACK;
