-- Verify mailroom:harden_privileges on pg

BEGIN;

DO $$
BEGIN
  ASSERT NOT pg_catalog.has_function_privilege('mailroom_runner', 'mailroom.cache_sweep(bigint, timestamptz)', 'execute'),
         'mailroom_runner can still execute cache_sweep';
  ASSERT NOT pg_catalog.has_function_privilege('mailroom_runner', 'mailroom.rate_limit_sweep(timestamptz)', 'execute'),
         'mailroom_runner can still execute rate_limit_sweep';
  ASSERT pg_catalog.has_function_privilege('mailroom_operator', 'mailroom.cache_sweep(bigint, timestamptz)', 'execute'),
         'mailroom_operator lost cache_sweep';
  ASSERT NOT pg_catalog.has_type_privilege('public', 'mailroom.cron_spec', 'usage'),
         'PUBLIC still has USAGE on mailroom.cron_spec';
END
$$;

ROLLBACK;
