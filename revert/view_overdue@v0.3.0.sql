-- Revert mailroom:view_overdue from pg

BEGIN;

DROP VIEW mailroom.overdue;

COMMIT;
