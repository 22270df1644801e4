-- Verify mailroom:cache_set on pg

BEGIN;

DO $$
BEGIN
  ASSERT pg_catalog.has_function_privilege('mailroom_app', 'mailroom.cache_set(text, jsonb, interval, timestamptz)', 'execute'),
         'mailroom_app cannot execute cache_set';
END
$$;

ROLLBACK;
