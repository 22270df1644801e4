-- Revert mailroom:release from pg

BEGIN;

DROP FUNCTION mailroom.release(bigint[], uuid, timestamptz);

COMMIT;
