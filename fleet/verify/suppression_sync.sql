-- Verify mailroom_fleet:suppression_sync on pg (no shard is called)

BEGIN;

SELECT source, target, after_xid, after_key, after_stream, copied, synced_at
FROM mailroom_fleet.suppression_cursors WHERE false;
SELECT started_at, finished_at, complete, shards, unreached, rows_read, errors
FROM mailroom_fleet.suppression_sync_runs WHERE false;
SELECT 1/has_function_privilege('mailroom_fleet_operator', 'mailroom_fleet.sync_suppressions(integer)', 'execute')::int;
SELECT 1/(NOT has_function_privilege('public', 'mailroom_fleet._suppress_copies(integer[], text[], text[], text[], text[], text[])', 'execute'))::int;
DO $$
BEGIN
  ASSERT (SELECT prosrc LIKE '%fleet copy from ([^:]+)%' FROM pg_proc
          WHERE oid = 'mailroom_fleet.sync_suppressions(integer)'::regprocedure),
    'sync_suppressions writes on the copies of a suppression whose origin it read';
END
$$;

ROLLBACK;
