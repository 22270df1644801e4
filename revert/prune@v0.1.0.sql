-- Revert mailroom:prune from pg

BEGIN;

DROP FUNCTION mailroom.prune(interval, timestamptz);
DROP INDEX mailroom.messages_finished_idx;

COMMIT;
