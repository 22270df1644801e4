-- Revert mailroom:view_queue_stats from pg

BEGIN;

DROP VIEW mailroom.queue_stats;
DROP FUNCTION mailroom.open_transactions(timestamptz);

-- pg_read_all_stats stays granted to mailroom_owner: roles are cluster-wide
-- and another database on this cluster may rely on it (it goes when the role
-- itself is dropped by the roles change's revert).

COMMIT;
