-- Revert mailroom:view_repeated_attempts from pg: back to the state split_messages
-- left (no repeated_attempts view; its revert creates the v0.3 one on the table again).

BEGIN;

DROP VIEW mailroom.repeated_attempts;

COMMIT;
