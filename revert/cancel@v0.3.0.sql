-- Revert mailroom:cancel from pg

BEGIN;

DROP FUNCTION mailroom.cancel(bigint[], text, timestamptz);

COMMIT;
