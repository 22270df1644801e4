-- Revert mailroom:integrity_problems from pg

BEGIN;

DROP FUNCTION mailroom.integrity_problems();

COMMIT;
