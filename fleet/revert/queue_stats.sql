-- Revert mailroom_fleet:queue_stats from pg

BEGIN;

DROP FUNCTION mailroom_fleet.fleet_summary();
DROP FUNCTION mailroom_fleet.queue_summary();
DROP FUNCTION mailroom_fleet.queue_stats();

COMMIT;
