-- Revert mailroom:extend_lease from pg

BEGIN;

DROP FUNCTION mailroom.extend_lease(bigint[], uuid, interval, timestamptz);

COMMIT;
