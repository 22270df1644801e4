-- Revert mailroom:view_queue_stats from pg: back to the state split_messages
-- left - no queue_stats view (its revert creates the v0.3 one on the table
-- again) and the v0.3 open_transactions(p_now), which that view calls.

BEGIN;

DROP VIEW mailroom.queue_stats;
DROP FUNCTION mailroom.open_transactions();

CREATE FUNCTION mailroom.open_transactions(p_now timestamptz DEFAULT clock_timestamp())
RETURNS TABLE (
  kind             text,
  pid              integer,
  usename          name,
  application_name text,
  client_addr      inet,
  state            text,
  xact_start       timestamptz,
  age              interval,
  prepared_gid     text,
  pins_horizon     boolean,
  horizon_xid_age  integer
)
LANGUAGE sql STABLE
SECURITY DEFINER
SET search_path = mailroom, pg_temp
AS $$
  -- No query text: operators see who holds a transaction, not what it reads.
  SELECT CASE WHEN a.query = '<insufficient privilege>' THEN 'hidden' ELSE 'transaction' END,
         a.pid, a.usename, a.application_name, a.client_addr, a.state, a.xact_start,
         p_now - a.xact_start, NULL::text,
         a.backend_xmin IS NOT NULL OR a.backend_xid IS NOT NULL,
         greatest(pg_catalog.age(a.backend_xmin), pg_catalog.age(a.backend_xid))
  FROM pg_catalog.pg_stat_activity a
  WHERE a.datname = current_database()
    AND a.backend_type NOT LIKE 'autovacuum%'
    AND (a.xact_start IS NOT NULL OR a.query = '<insufficient privilege>')
  UNION ALL
  SELECT 'prepared', NULL, p.owner, NULL, NULL, 'prepared', p.prepared, p_now - p.prepared, p.gid,
         true, pg_catalog.age(p.transaction)
  FROM pg_catalog.pg_prepared_xacts p
  WHERE p.database = current_database()
  ORDER BY 8 DESC NULLS LAST
$$;
ALTER FUNCTION mailroom.open_transactions(timestamptz) OWNER TO mailroom_owner;
REVOKE ALL ON FUNCTION mailroom.open_transactions(timestamptz) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION mailroom.open_transactions(timestamptz) TO mailroom_operator;
COMMENT ON FUNCTION mailroom.open_transactions(timestamptz) IS
  'Open transactions in this database, oldest first: kind transaction (pid for pg_terminate_backend), prepared (prepared_gid for ROLLBACK PREPARED) or hidden (another role''s session mailroom_owner cannot see: grant it pg_read_all_stats). Who and how long, never the query text; pins_horizon: it holds a snapshot or a transaction id, so vacuum cannot remove rows that died after it (horizon_xid_age: how many transactions ago). p_now defaults to clock_timestamp(), not now(): ages are measured at the call, not from the start of the caller''s own transaction.';

COMMIT;
