-- Verify mailroom:cache_set on pg

BEGIN;

DO $$
BEGIN
  ASSERT pg_catalog.has_function_privilege('mailroom_app', 'mailroom.cache_set(text, jsonb, interval, timestamptz)', 'execute'),
         'mailroom_app cannot execute cache_set';
  BEGIN
    PERFORM mailroom.cache_set('verify:k', '1', interval '1000 years');
    RAISE EXCEPTION 'cache_set accepted a 1000-year ttl';
  EXCEPTION WHEN invalid_parameter_value THEN
    NULL;
  END;
END
$$;

ROLLBACK;
