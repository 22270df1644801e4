-- Revert mailroom:reclaim from pg

BEGIN;

DROP FUNCTION mailroom.reclaim(timestamptz, integer);

COMMIT;
