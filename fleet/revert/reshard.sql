-- Revert mailroom_fleet:reshard from pg. mailroom_fleet_owner keeps
-- pg_read_all_stats: the role is cluster-wide, shared by every directory of
-- the cluster (the schema's revert keeps the roles for the same reason), and
-- another directory's calls_begun_before would go blind without it.

BEGIN;

DROP FUNCTION mailroom_fleet.map_check();
DROP FUNCTION mailroom_fleet._shard_identity_on(integer);
DROP FUNCTION mailroom_fleet.calls_begun_before(timestamptz);
DROP VIEW mailroom_fleet.shards;

COMMIT;
