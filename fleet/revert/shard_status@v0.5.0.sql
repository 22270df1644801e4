-- Revert mailroom_fleet:shard_status from pg

BEGIN;

DROP FUNCTION mailroom_fleet.shard_status();
DROP FUNCTION mailroom_fleet._shard_summary_on(integer);

COMMIT;
