-- Deploy mailroom_fleet:reshard to pg
-- requires: shard_status

-- What an operator needs to change the shard map with mail in flight
-- (docs/fleet.md, "Adding a shard", "Retiring a shard").
--
-- calls_begun_before(moment): PL/Proxy reads the map once per directory
-- transaction. A transaction that began before an ALTER SERVER keeps
-- routing by the map as it was, to its end (tests/test_fleet_reshard.py
-- shows an enqueue landing on the old shard after the change committed).
-- So a shard whose partitions were moved away may still receive mail, and
-- a shard that took partitions may still miss a fleet suppress, until every
-- transaction older than the change has ended: this lists them. The caller
-- passes a moment taken after the change committed; the list is then a
-- superset of the transactions that may use the old map, and once it is
-- empty every call routes by the new one. mailroom_fleet_owner gets
-- pg_read_all_stats to see other roles' sessions (no query text is shown);
-- a session it cannot see is listed as hidden, never left out.
--
-- map_check(): the map's problems that shard_status() does not name: a
-- shard that refuses writes (a retired shard made read-only, a standby),
-- so enqueue and suppress routed to it fail; a database with no mailroom
-- schema; a database name reached by two connect strings (RUN ON ALL would
-- run twice on one database, or two shards could not be told apart by
-- their rows' shard tag). No row: the map is fit to take mail.

BEGIN;

GRANT pg_read_all_stats TO mailroom_fleet_owner;

-- The shards of the map: partitions that name one connect string are one
-- shard (RUN ON ALL runs once per connect string), reached through the
-- first of them.
CREATE VIEW mailroom_fleet.shards AS
SELECT coalesce(substring(m.connstr FROM 'dbname=''?([^'' ]+)'), '(no dbname)') AS dbname,
       array_agg(m.partition ORDER BY m.partition) AS partitions,
       min(m.partition) AS first_partition,
       format('partition %s (dbname %s)', string_agg('p' || m.partition, ', ' ORDER BY m.partition),
              coalesce(substring(m.connstr FROM 'dbname=''?([^'' ]+)'), '(no dbname)')) AS label,
       m.connstr
FROM mailroom_fleet.shard_map m
GROUP BY m.connstr;
ALTER VIEW mailroom_fleet.shards OWNER TO mailroom_fleet_owner;
REVOKE ALL ON mailroom_fleet.shards FROM PUBLIC;
GRANT SELECT ON mailroom_fleet.shards TO mailroom_fleet_operator;
COMMENT ON VIEW mailroom_fleet.shards IS
  'The shards of the map, one row per distinct connect string: the dbname it names, its partitions, the first of them (through which the fleet asks it alone) and a label for messages.';

CREATE FUNCTION mailroom_fleet.calls_begun_before(p_moment timestamptz)
RETURNS TABLE (pid integer, usename text, application_name text, state text, xact_start timestamptz,
               open_for interval)
LANGUAGE plpgsql STABLE
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
  IF p_moment IS NULL THEN
    RAISE EXCEPTION 'mailroom_fleet: moment: required (a time taken after the map change committed)'
      USING ERRCODE = '22023';
  END IF;
  RETURN QUERY
  SELECT a.pid,
         a.usename::text,
         a.application_name,
         CASE WHEN a.query = '<insufficient privilege>' THEN 'hidden' ELSE a.state END,
         a.xact_start,
         clock_timestamp() - a.xact_start
  FROM pg_catalog.pg_stat_activity a
  WHERE a.datname = pg_catalog.current_database()
    AND a.pid <> pg_catalog.pg_backend_pid()
    AND a.backend_type = 'client backend'
    AND (a.xact_start < p_moment OR a.query = '<insufficient privilege>')
  ORDER BY a.xact_start NULLS FIRST, a.pid;
END
$$;
ALTER FUNCTION mailroom_fleet.calls_begun_before(timestamptz) OWNER TO mailroom_fleet_owner;
REVOKE ALL ON FUNCTION mailroom_fleet.calls_begun_before(timestamptz) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION mailroom_fleet.calls_begun_before(timestamptz) TO mailroom_fleet_operator;
COMMENT ON FUNCTION mailroom_fleet.calls_begun_before(timestamptz) IS
  'The directory''s transactions (other than the caller''s) open since before p_moment: each may still route by the shard map as it stood when it began (PL/Proxy reads the map once per transaction). After changing the map, take a moment, then call this until it returns no row: from then on every call uses the new map. pid for pg_terminate_backend; state hidden: a session this function cannot see into, counted as old.';

-- Who the shard behind partition p_partition is, and whether it takes writes.
CREATE FUNCTION mailroom_fleet._shard_identity_on(p_partition integer)
RETURNS TABLE (shard text, mailroom boolean, read_only boolean, in_recovery boolean)
LANGUAGE plproxy
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
  CLUSTER 'mailroom_fleet';
  RUN ON p_partition;
  SELECT pg_catalog.current_database()::text AS shard,
         pg_catalog.to_regnamespace('mailroom') IS NOT NULL AS mailroom,
         pg_catalog.current_setting('transaction_read_only')::boolean AS read_only,
         pg_catalog.pg_is_in_recovery() AS in_recovery;
$$;
ALTER FUNCTION mailroom_fleet._shard_identity_on(integer) OWNER TO mailroom_fleet_owner;
REVOKE ALL ON FUNCTION mailroom_fleet._shard_identity_on(integer) FROM PUBLIC;
COMMENT ON FUNCTION mailroom_fleet._shard_identity_on(integer) IS
  'Internal to map_check(): the database behind partition p_partition, whether it has the mailroom schema and whether a new session there is read-only or a standby.';

CREATE FUNCTION mailroom_fleet.map_check()
RETURNS TABLE (problem text, shard text, partitions integer[], detail text)
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
  v_shard  record;
  v_id     record;
  v_names  text[] := '{}';    -- per partition: the database it reaches,
  v_parts  integer[] := '{}'; -- the partition,
  v_conns  text[] := '{}';    -- and its connect string
BEGIN
  FOR v_shard IN SELECT * FROM mailroom_fleet.shards ORDER BY first_partition LOOP
    partitions := v_shard.partitions;
    BEGIN
      SELECT * INTO STRICT v_id FROM mailroom_fleet._shard_identity_on(v_shard.first_partition);
      shard := v_id.shard;
      IF NOT v_id.mailroom THEN
        problem := 'no_mailroom_shard';
        detail := format('%s: the database has no mailroom schema (renamed, recreated empty, a typo): every call routed to it fails',
                         v_shard.label);
      ELSIF v_id.in_recovery OR v_id.read_only THEN
        problem := 'read_only';
        detail := format('%s: %s, so enqueue and suppress routed to it fail: point its partitions at a shard that takes mail',
                         v_shard.label, CASE WHEN v_id.in_recovery THEN 'a standby (in recovery)'
                                             ELSE 'its sessions are read-only (default_transaction_read_only: a retired shard?)' END);
      ELSE
        problem := NULL;
      END IF;
    EXCEPTION WHEN OTHERS THEN
      shard := v_shard.dbname;
      problem := 'unreachable';
      detail := format('%s: %s', v_shard.label, SQLERRM);
    END;
    IF problem IS NOT NULL THEN
      RETURN NEXT;
    END IF;
    v_names := v_names || array_fill(shard, ARRAY[cardinality(v_shard.partitions)]);
    v_parts := v_parts || v_shard.partitions;
    v_conns := v_conns || array_fill(v_shard.connstr, ARRAY[cardinality(v_shard.partitions)]);
  END LOOP;
  RETURN QUERY
  SELECT 'same_name_twice'::text, u.name, array_agg(u.part ORDER BY u.part),
         format('%s connect strings reach a database named %s (partitions %s): one database under two spellings (RUN ON ALL runs twice on it) or two shards of one name (their rows cannot be told apart); give each shard one connect string and its own name',
                count(DISTINCT u.conn), u.name,
                array_to_string(array_agg('p' || u.part ORDER BY u.part), ', '))
  FROM unnest(v_names, v_parts, v_conns) AS u(name, part, conn)
  GROUP BY u.name
  HAVING count(DISTINCT u.conn) > 1
  ORDER BY u.name;
END
$$;
ALTER FUNCTION mailroom_fleet.map_check() OWNER TO mailroom_fleet_owner;
REVOKE ALL ON FUNCTION mailroom_fleet.map_check() FROM PUBLIC;
GRANT EXECUTE ON FUNCTION mailroom_fleet.map_check() TO mailroom_fleet_operator;
COMMENT ON FUNCTION mailroom_fleet.map_check() IS
  'The shard map''s problems, one row each (no row: every partition reaches a mailroom shard that takes mail): unreachable (with the error), no_mailroom_shard, read_only (a retired shard or a standby: enqueue and suppress routed there fail), same_name_twice (one database name behind two connect strings). Asks each shard on its own, like shard_status().';

COMMIT;
