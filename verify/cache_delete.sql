-- Verify mailroom:cache_delete on pg

BEGIN;

DO $$
BEGIN
  ASSERT pg_catalog.has_function_privilege('mailroom_app', 'mailroom.cache_delete(text)', 'execute'),
         'mailroom_app cannot execute cache_delete';
END
$$;

ROLLBACK;
