-- Verify mailroom:cache_get_or_lock on pg

BEGIN;

DO $$
BEGIN
  ASSERT pg_catalog.has_function_privilege('mailroom_app', 'mailroom.cache_get_or_lock(text, interval)', 'execute'),
         'mailroom_app cannot execute cache_get_or_lock';
  ASSERT pg_catalog.to_regprocedure('mailroom.cache_get_or_lock(text, interval, timestamptz)') IS NULL,
         'cache_get_or_lock still takes p_now';
  ASSERT pg_catalog.has_function_privilege('mailroom_app', 'mailroom.cache_unlock(text)', 'execute'),
         'mailroom_app cannot execute cache_unlock';
  ASSERT NOT pg_catalog.has_function_privilege('mailroom_app', 'mailroom._cache_lock_id(text)', 'execute'),
         '_cache_lock_id is internal';
END
$$;

ROLLBACK;
