-- Revert mailroom:harden_privileges from pg

BEGIN;

GRANT EXECUTE ON FUNCTION mailroom.cache_sweep(bigint, timestamptz) TO mailroom_runner;
GRANT EXECUTE ON FUNCTION mailroom.rate_limit_sweep(timestamptz) TO mailroom_runner;
GRANT USAGE ON TYPE mailroom.cron_spec TO PUBLIC;

COMMIT;
