-- Verify mailroom:cache_sweep on pg

BEGIN;

DO $$
BEGIN
  ASSERT pg_catalog.has_function_privilege('mailroom_operator', 'mailroom.cache_sweep(bigint)', 'execute'),
         'mailroom_operator cannot execute cache_sweep';
  ASSERT NOT pg_catalog.has_function_privilege('mailroom_runner', 'mailroom.cache_sweep(bigint)', 'execute'),
         'mailroom_runner can execute cache_sweep';
  ASSERT pg_catalog.to_regprocedure('mailroom.cache_sweep(bigint, timestamptz)') IS NULL,
         'cache_sweep still takes p_now';
END
$$;

ROLLBACK;
