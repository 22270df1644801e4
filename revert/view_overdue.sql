-- Revert mailroom:view_overdue from pg: back to the state split_messages
-- left (no overdue view; its revert creates the v0.3 one on the table again).

BEGIN;

DROP VIEW mailroom.overdue;

COMMIT;
