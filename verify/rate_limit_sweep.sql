-- Verify mailroom:rate_limit_sweep on pg

BEGIN;

DO $$
BEGIN
  ASSERT pg_catalog.has_function_privilege('mailroom_operator', 'mailroom.rate_limit_sweep()', 'execute'),
         'mailroom_operator cannot execute rate_limit_sweep';
  ASSERT NOT pg_catalog.has_function_privilege('mailroom_runner', 'mailroom.rate_limit_sweep()', 'execute'),
         'mailroom_runner can execute rate_limit_sweep';
  ASSERT pg_catalog.to_regprocedure('mailroom.rate_limit_sweep(timestamptz)') IS NULL,
         'rate_limit_sweep still takes p_now';
END
$$;

ROLLBACK;
