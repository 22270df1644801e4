-- Revert mailroom:schema from pg

BEGIN;

DROP SCHEMA mailroom;

COMMIT;
