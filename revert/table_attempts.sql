-- Revert mailroom:table_attempts from pg

BEGIN;

DROP TABLE mailroom.attempts;

COMMIT;
