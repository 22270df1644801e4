-- Revert mailroom:cache_sweep from pg

BEGIN;

DROP FUNCTION mailroom.cache_sweep(bigint, timestamptz);

COMMIT;
