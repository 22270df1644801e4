-- Verify mailroom:rate_limit on pg

BEGIN;

DO $$
BEGIN
  ASSERT pg_catalog.has_function_privilege('mailroom_app', 'mailroom.rate_limit(text, integer, interval, timestamptz)', 'execute'),
         'mailroom_app cannot execute rate_limit';
  ASSERT NOT pg_catalog.has_function_privilege('mailroom_app', 'mailroom._rate_check_args(text, integer, interval)', 'execute'),
         '_rate_check_args is internal';
  BEGIN
    PERFORM mailroom._rate_check_args('k', 1, interval '1000000 years');
    RAISE EXCEPTION '_rate_check_args accepted a 1,000,000-year window';
  EXCEPTION WHEN invalid_parameter_value THEN
    NULL;
  END;
END
$$;

ROLLBACK;
