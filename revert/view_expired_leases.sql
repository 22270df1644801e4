-- Revert mailroom:view_expired_leases from pg: back to the state split_messages
-- left (no expired_leases view; its revert creates the v0.3 one on the table again).

BEGIN;

DROP VIEW mailroom.expired_leases;

COMMIT;
