-- Verify mailroom:cache_get on pg

BEGIN;

DO $$
BEGIN
  ASSERT pg_catalog.has_function_privilege('mailroom_app', 'mailroom.cache_get(text, timestamptz)', 'execute'),
         'mailroom_app cannot execute cache_get';
END
$$;

ROLLBACK;
