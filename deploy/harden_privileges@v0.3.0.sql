-- Deploy mailroom:harden_privileges to pg
-- requires: cache_sweep
-- requires: rate_limit_sweep
-- requires: function_next_occurrence

-- Least privilege, as tests/pgtap/security.sql checks it for every object:
-- * mailroom_runner claims, reports outcomes, extends and releases leases and
--   reclaims (the role's comment); the runner never sweeps. cache_sweep(0)
--   would let any runner login empty the applications' cache. pg_cron (as the
--   job's owner) and mailroom_operator keep both sweeps.
-- * A new type gets USAGE for PUBLIC by default; cron_spec had it.

BEGIN;

REVOKE EXECUTE ON FUNCTION mailroom.cache_sweep(bigint, timestamptz) FROM mailroom_runner;
REVOKE EXECUTE ON FUNCTION mailroom.rate_limit_sweep(timestamptz) FROM mailroom_runner;
REVOKE ALL ON TYPE mailroom.cron_spec FROM PUBLIC;

COMMIT;
