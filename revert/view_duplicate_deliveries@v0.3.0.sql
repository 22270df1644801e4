-- Revert mailroom:view_duplicate_deliveries from pg

BEGIN;

DROP VIEW mailroom.duplicate_deliveries;
DROP INDEX mailroom.attempts_doubtful_idx;

COMMIT;
