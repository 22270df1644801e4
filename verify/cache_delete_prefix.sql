-- Verify mailroom:cache_delete_prefix on pg

BEGIN;

DO $$
BEGIN
  ASSERT pg_catalog.has_function_privilege('mailroom_app', 'mailroom.cache_delete_prefix(text)', 'execute'),
         'mailroom_app cannot execute cache_delete_prefix';
END
$$;

ROLLBACK;
