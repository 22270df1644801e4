-- Verify mailroom:cache_get on pg

BEGIN;

DO $$
BEGIN
  ASSERT pg_catalog.has_function_privilege('mailroom_app', 'mailroom.cache_get(text)', 'execute'),
         'mailroom_app cannot execute cache_get';
  ASSERT pg_catalog.to_regprocedure('mailroom.cache_get(text, timestamptz)') IS NULL,
         'cache_get still takes p_now';
END
$$;

ROLLBACK;
