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
  ASSERT NOT pg_catalog.has_table_privilege('mailroom_app', 'mailroom.cache_loads', 'insert'),
         'cache_loads is mailroom''s own';
  ASSERT pg_catalog.pg_get_functiondef('mailroom.cache_get_or_lock(text, interval)'::regprocedure) NOT LIKE '%advisory%',
         'cache_get_or_lock still takes an advisory lock';
END
$$;

ROLLBACK;
