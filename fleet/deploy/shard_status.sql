-- Deploy mailroom_fleet:shard_status to pg
-- requires: shard_status@v0.5.0
-- requires: reshard

-- The fleet's status when a shard is missing. Every RUN ON ALL call needs
-- every shard (one that does not answer fails it), which is right for a
-- total but leaves an operator blind exactly when a shard is in trouble.
-- PL/Proxy cannot answer partially in one call, so shard_status asks each
-- shard on its own: a loop over the distinct connect strings of the map
-- (partitions that name one database are one shard, asked once, through the
-- first of its partitions), each call in its own BEGIN/EXCEPTION block. A
-- shard that refuses connections, hangs until its connect_timeout or the
-- server's query_timeout, or is no mailroom shard (a stale map) is a row
-- with answered = false, its partitions and the error; the others answer.
-- The loop is sequential: a hung shard costs its timeout once per call.
-- The shards, their partitions and labels are the view mailroom_fleet.shards
-- (reshard), the one grouping of the map that map_check reads too.

BEGIN;

-- One shard's queue_summary row and its warning rows (as JSON), on the
-- shard that partition p_partition names (RUN ON an integer: PL/Proxy masks
-- it with partitions - 1, so a partition number picks that partition).
CREATE OR REPLACE FUNCTION mailroom_fleet._shard_summary_on(p_partition integer)
RETURNS TABLE (shard text, messages bigint, due bigint, queued bigint, sending bigint, paused bigint,
               review bigint, oldest_age interval, oldest_due_age interval, warnings bigint,
               warning_list jsonb)
LANGUAGE plproxy
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
  CLUSTER 'mailroom_fleet';
  RUN ON p_partition;
  SELECT pg_catalog.current_database()::text AS shard,
         coalesce(sum(s.messages) FILTER (WHERE s.kind = 'queue'), 0)::bigint AS messages,
         coalesce(sum(s.due) FILTER (WHERE s.kind = 'queue'), 0)::bigint AS due,
         coalesce(sum(s.messages) FILTER (WHERE s.kind = 'queue' AND s.status = 'queued'), 0)::bigint AS queued,
         coalesce(sum(s.messages) FILTER (WHERE s.kind = 'queue' AND s.status = 'sending'), 0)::bigint AS sending,
         coalesce(sum(s.messages) FILTER (WHERE s.kind = 'queue' AND s.status = 'paused'), 0)::bigint AS paused,
         coalesce(sum(s.messages) FILTER (WHERE s.kind = 'queue' AND s.status = 'review'), 0)::bigint AS review,
         max(s.oldest_age) FILTER (WHERE s.kind = 'queue') AS oldest_age,
         max(s.oldest_due_age) FILTER (WHERE s.kind = 'queue') AS oldest_due_age,
         count(*) FILTER (WHERE s.kind = 'warning') AS warnings,
         coalesce(pg_catalog.jsonb_agg(pg_catalog.jsonb_build_object(
                    'warning', s.warning, 'sender', s.sender, 'messages', s.messages, 'detail', s.detail)
                    ORDER BY s.warning, s.sender) FILTER (WHERE s.kind = 'warning'), '[]') AS warning_list
  FROM mailroom.queue_stats s;
$$;
ALTER FUNCTION mailroom_fleet._shard_summary_on(integer) OWNER TO mailroom_fleet_owner;
REVOKE ALL ON FUNCTION mailroom_fleet._shard_summary_on(integer) FROM PUBLIC;
COMMENT ON FUNCTION mailroom_fleet._shard_summary_on(integer) IS
  'Internal to shard_status(): the queue summary and warnings of the shard that partition p_partition names. Fails as PL/Proxy does when that shard does not answer.';

CREATE OR REPLACE FUNCTION mailroom_fleet.shard_status()
RETURNS TABLE (shard text, partitions integer[], answered boolean, error text, error_code text,
               messages bigint, due bigint, queued bigint, sending bigint, paused bigint, review bigint,
               oldest_age interval, oldest_due_age interval, warnings bigint, warning_list jsonb)
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
  v_shard record;
  v_row   record;
BEGIN
  FOR v_shard IN SELECT * FROM mailroom_fleet.shards ORDER BY first_partition LOOP
    partitions := v_shard.partitions;
    BEGIN
      SELECT * INTO STRICT v_row FROM mailroom_fleet._shard_summary_on(v_shard.first_partition);
      shard := v_row.shard;
      answered := true;
      error := NULL;
      error_code := NULL;
      messages := v_row.messages; due := v_row.due; queued := v_row.queued; sending := v_row.sending;
      paused := v_row.paused; review := v_row.review; oldest_age := v_row.oldest_age;
      oldest_due_age := v_row.oldest_due_age; warnings := v_row.warnings; warning_list := v_row.warning_list;
    EXCEPTION WHEN OTHERS THEN
      shard := v_shard.dbname;
      answered := false;
      error_code := SQLSTATE;
      -- A database without mailroom's schema or view: the map points at
      -- something that is no shard (renamed, recreated empty, a typo).
      error := format('%s: %s%s', v_shard.label,
                      CASE WHEN SQLSTATE IN ('42P01', '3F000', '42883') THEN 'no mailroom shard: ' ELSE '' END,
                      SQLERRM);
      messages := NULL; due := NULL; queued := NULL; sending := NULL; paused := NULL; review := NULL;
      oldest_age := NULL; oldest_due_age := NULL; warnings := NULL; warning_list := NULL;
    END;
    RETURN NEXT;
  END LOOP;
END
$$;
ALTER FUNCTION mailroom_fleet.shard_status() OWNER TO mailroom_fleet_owner;
REVOKE ALL ON FUNCTION mailroom_fleet.shard_status() FROM PUBLIC;
GRANT EXECUTE ON FUNCTION mailroom_fleet.shard_status() TO mailroom_fleet_operator;
COMMENT ON FUNCTION mailroom_fleet.shard_status() IS
  'Every shard of the map asked on its own: a row per distinct connect string (its partitions), answered true with its queue summary and warning rows (warning_list, JSON), or answered false with error (naming the partitions, the dbname and the cause) and its SQLSTATE (error_code). Never fails for one shard: a partial answer is marked, row by row.';

COMMIT;
