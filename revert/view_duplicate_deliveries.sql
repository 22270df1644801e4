-- Revert mailroom:view_duplicate_deliveries from pg: back to the state
-- split_messages left (no duplicate_deliveries view, attempts_doubtful_idx
-- kept; its revert creates the v0.3 view on the table again).

BEGIN;

DROP VIEW mailroom.duplicate_deliveries;

COMMIT;
