-- Revert mailroom:attempts_finished_at_idx from pg

BEGIN;

DROP INDEX mailroom.attempts_finished_at_idx;

COMMIT;
