-- Revert mailroom:view_repeated_attempts from pg

BEGIN;

DROP VIEW mailroom.repeated_attempts;

COMMIT;
