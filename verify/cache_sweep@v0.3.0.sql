-- Verify mailroom:cache_sweep on pg

BEGIN;

DO $$
BEGIN
  ASSERT pg_catalog.has_function_privilege('mailroom_operator', 'mailroom.cache_sweep(bigint, timestamptz)', 'execute'),
         'mailroom_operator cannot execute cache_sweep';
END
$$;

ROLLBACK;
