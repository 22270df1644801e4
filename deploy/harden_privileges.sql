-- Deploy mailroom:harden_privileges to pg (rework for v0.4)
-- requires: harden_privileges@v0.3.0
-- requires: split_messages
-- requires: cache_sweep
-- requires: rate_limit_sweep
--
-- Least privilege, as tests/pgtap/security.sql checks it for every object:
-- * mailroom_runner claims, reports outcomes, extends and releases leases and
--   reclaims (the role's comment); the runner never sweeps. cache_sweep(0)
--   would let any runner login empty the applications' cache. pg_cron (as the
--   job's owner) and mailroom_operator keep both sweeps.
-- * A new type gets USAGE for PUBLIC by default; cron_spec had it.
--
-- Reworked for v0.4: the sweeps lost p_now (issue 13, item 4), so they are
-- new functions, cache_sweep(bigint) and rate_limit_sweep(). Their changes
-- already grant them to mailroom_operator alone; the REVOKEs below say the
-- rule here, where it has always been said, and cost nothing when already true.

BEGIN;

REVOKE EXECUTE ON FUNCTION mailroom.cache_sweep(bigint) FROM mailroom_runner;
REVOKE EXECUTE ON FUNCTION mailroom.rate_limit_sweep() FROM mailroom_runner;
REVOKE ALL ON TYPE mailroom.cron_spec FROM PUBLIC;

COMMIT;
