-- Revert mailroom_fleet:suppression_sync from pg

BEGIN;

DO $$
BEGIN
  -- cron.job is only named where pg_cron is (EXECUTE: not parsed elsewhere).
  IF EXISTS (SELECT FROM pg_catalog.pg_extension WHERE extname = 'pg_cron') THEN
    EXECUTE $q$SELECT cron.unschedule(jobid) FROM cron.job WHERE jobname = 'mailroom-fleet-suppression-sync'$q$;
  END IF;
END
$$;
DROP FUNCTION mailroom_fleet.sync_suppressions(integer);
DROP FUNCTION mailroom_fleet._suppress_copies(integer[], text[], text[], text[], text[], text[]);
DROP FUNCTION mailroom_fleet._suppressions_new(integer[], text[], xid8[], text[], text[], integer);
DROP FUNCTION mailroom_fleet._shard_name(integer);
DROP TABLE mailroom_fleet.suppression_sync_runs;
DROP TABLE mailroom_fleet.suppression_cursors;

COMMIT;
