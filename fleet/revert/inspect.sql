-- Revert mailroom_fleet:inspect from pg

BEGIN;

DROP FUNCTION mailroom_fleet.inspect(text);

COMMIT;
