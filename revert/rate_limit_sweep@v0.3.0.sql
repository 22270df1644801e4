-- Revert mailroom:rate_limit_sweep from pg

BEGIN;

DROP FUNCTION mailroom.rate_limit_sweep(timestamptz);

COMMIT;
