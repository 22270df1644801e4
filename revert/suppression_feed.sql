-- Revert mailroom:suppression_feed from pg

BEGIN;

DROP FUNCTION mailroom.suppress_copies(text[], text[], text[], text[], text[]);
DROP FUNCTION mailroom.suppressions_written(xid8, text, text, integer);
DROP INDEX mailroom.suppressions_written_idx;
ALTER TABLE mailroom.suppressions DROP COLUMN written_xid;

COMMIT;
