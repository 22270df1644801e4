-- Verify mailroom:rate_limit_sweep on pg

BEGIN;

DO $$
BEGIN
  ASSERT pg_catalog.has_function_privilege('mailroom_operator', 'mailroom.rate_limit_sweep(timestamptz)', 'execute'),
         'mailroom_operator cannot execute rate_limit_sweep';
END
$$;

ROLLBACK;
