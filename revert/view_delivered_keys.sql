-- Revert mailroom:view_delivered_keys from pg: back to the state split_messages
-- left (no delivered_keys view; its revert creates the v0.3 one on the table again).

BEGIN;

DROP VIEW mailroom.delivered_keys;

COMMIT;
