-- Revert mailroom_fleet:suppression_sync from pg: back to the v0.5.0
-- sync_suppressions, which writes every copy on to every shard again. The
-- change redefined only that function; the tables, the other functions and
-- the pg_cron job are as in v0.5.0.

BEGIN;

CREATE OR REPLACE FUNCTION mailroom_fleet.sync_suppressions(p_page integer DEFAULT 1000)
RETURNS TABLE (shard text, partitions integer[], reached boolean, pulled bigint, copied bigint, error text)
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
  v_started   timestamptz := clock_timestamp();
  v_part      integer[] := '{}';   -- per shard reached: the partition its calls go to
  v_name      text[] := '{}';
  v_up        boolean[] := '{}';   -- still answering in this run
  v_pulled    bigint[] := '{}';
  v_copied    bigint[] := '{}';
  v_error     text[] := '{}';
  v_unreached integer[] := '{}';
  v_group     record;
  v_one       text;
  v_xids      xid8[];
  v_keys      text[];
  v_streams   text[];
  v_from      record;
  v_rows      jsonb;
  v_union     record;
  v_last      record;
  v_took      record;
  v_took_all  jsonb;
  v_full      boolean;
  v_round     integer := 0;
  v_read      bigint := 0;
  s           integer;
  t           integer;
BEGIN
  IF p_page IS NULL OR p_page < 1 OR p_page > 100000 THEN
    RAISE EXCEPTION 'mailroom_fleet: page: must be between 1 and 100000, got %', coalesce(p_page::text, 'NULL')
      USING ERRCODE = '22023';
  END IF;
  -- One sync at a time (the pg_cron job and a call at once): the second
  -- waits for the first, then finds the cursors it moved.
  LOCK TABLE mailroom_fleet.suppression_cursors IN SHARE ROW EXCLUSIVE MODE;

  -- Which shards answer: one call per distinct connect string (as RUN ON
  -- ALL counts them), to its lowest partition.
  FOR v_group IN
    SELECT min(m.partition) AS part, array_agg(m.partition ORDER BY m.partition) AS parts
    FROM mailroom_fleet.shard_map m GROUP BY m.connstr ORDER BY 1
  LOOP
    BEGIN
      v_one := mailroom_fleet._shard_name(v_group.part);
      IF v_one = ANY (v_name) THEN
        RAISE EXCEPTION 'mailroom_fleet: shard map: two shards are both named %: give every shard database its own name', v_one
          USING ERRCODE = '22023';
      END IF;
      v_part := v_part || v_group.part;
      v_name := v_name || v_one;
      v_up := v_up || true;
      v_pulled := v_pulled || 0::bigint;
      v_copied := v_copied || 0::bigint;
      v_error := v_error || NULL::text;
    EXCEPTION WHEN OTHERS THEN
      RAISE WARNING 'mailroom_fleet: sync_suppressions: partitions % not reached: %', v_group.parts, SQLERRM;
      v_unreached := v_unreached || v_group.parts;
      shard := NULL; partitions := v_group.parts; reached := false; pulled := 0; copied := 0; error := SQLERRM;
      RETURN NEXT;   -- the shards not reached first; those reached once their counts are known
    END;
  END LOOP;

  LOOP
    EXIT WHEN (SELECT count(*) FROM unnest(v_up) u WHERE u) < 2;
    v_round := v_round + 1;
    -- Each source's position: its targets' lowest cursor (no cursor: from
    -- the start; cursors that differ: from the start of the lowest xid).
    v_xids := '{}'; v_keys := '{}'; v_streams := '{}';
    FOR s IN 1 .. cardinality(v_name) LOOP
      SELECT CASE WHEN bool_or(c.source IS NULL) THEN NULL ELSE min(c.after_xid) END AS xid,
             count(DISTINCT (c.after_xid, c.after_key, c.after_stream)) AS positions,
             min(c.after_key) AS key, min(c.after_stream) AS stream
      INTO v_from
      FROM generate_subscripts(v_name, 1) AS g(i)
      LEFT JOIN mailroom_fleet.suppression_cursors c ON c.source = v_name[s] AND c.target = v_name[g.i]
      WHERE g.i <> s AND v_up[g.i];
      v_xids := v_xids || v_from.xid;
      v_keys := v_keys || CASE WHEN v_from.xid IS NULL THEN NULL WHEN v_from.positions = 1 THEN v_from.key ELSE '' END;
      v_streams := v_streams || CASE WHEN v_from.xid IS NULL THEN NULL WHEN v_from.positions = 1 THEN v_from.stream ELSE '' END;
    END LOOP;

    -- Read: one call for every shard still up; should it fail (a shard went
    -- away since), each on its own, and the one that fails is down for the
    -- rest of the run.
    BEGIN
      SELECT coalesce(jsonb_agg(to_jsonb(r)), '[]') INTO v_rows
      FROM mailroom_fleet._suppressions_new(ARRAY(SELECT v_part[i] FROM generate_subscripts(v_part, 1) i WHERE v_up[i]),
                                            v_name, v_xids, v_keys, v_streams, p_page) r;
    EXCEPTION WHEN OTHERS THEN
      v_rows := '[]';
      FOR s IN 1 .. cardinality(v_name) LOOP
        CONTINUE WHEN NOT v_up[s];
        BEGIN
          v_rows := v_rows || (SELECT coalesce(jsonb_agg(to_jsonb(r)), '[]')
                               FROM mailroom_fleet._suppressions_new(ARRAY[v_part[s]], v_name, v_xids, v_keys,
                                                                     v_streams, p_page) r);
        EXCEPTION WHEN OTHERS THEN
          RAISE WARNING 'mailroom_fleet: sync_suppressions: reading % failed: %', v_name[s], SQLERRM;
          v_up[s] := false;
          v_error[s] := coalesce(v_error[s] || '; ', '') || 'read: ' || SQLERRM;
        END;
      END LOOP;
    END;
    EXIT WHEN jsonb_array_length(v_rows) = 0;
    v_read := v_read + jsonb_array_length(v_rows);

    SELECT array_agg(x.shard ORDER BY x.shard, x.n) AS origins,
           array_agg(x.address ORDER BY x.shard, x.n) AS addresses,
           array_agg(x.reason ORDER BY x.shard, x.n) AS reasons,
           array_agg(CASE WHEN x.source LIKE 'fleet copy from %' THEN x.source
                          ELSE left('fleet copy from ' || x.shard || coalesce(': ' || x.source, ''), 200) END
                     ORDER BY x.shard, x.n) AS sources,
           array_agg(x.stream ORDER BY x.shard, x.n) AS streams
    INTO v_union
    FROM jsonb_to_recordset(v_rows) AS x(shard text, n bigint, address text, reason text, source text, stream text);

    -- Write the union: one call for every shard still up, or each on its own.
    BEGIN
      SELECT coalesce(jsonb_object_agg(c.shard, to_jsonb(c)), '{}') INTO v_took_all
      FROM mailroom_fleet._suppress_copies(ARRAY(SELECT v_part[i] FROM generate_subscripts(v_part, 1) i WHERE v_up[i]),
                                           v_union.origins, v_union.addresses, v_union.reasons, v_union.sources,
                                           v_union.streams) c;
    EXCEPTION WHEN OTHERS THEN
      v_took_all := '{}';
      FOR t IN 1 .. cardinality(v_name) LOOP
        CONTINUE WHEN NOT v_up[t];
        BEGIN
          v_took_all := v_took_all || (SELECT coalesce(jsonb_object_agg(c.shard, to_jsonb(c)), '{}')
                                       FROM mailroom_fleet._suppress_copies(ARRAY[v_part[t]], v_union.origins,
                                                                            v_union.addresses, v_union.reasons,
                                                                            v_union.sources, v_union.streams) c);
        EXCEPTION WHEN OTHERS THEN
          RAISE WARNING 'mailroom_fleet: sync_suppressions: writing to % failed: %', v_name[t], SQLERRM;
          v_up[t] := false;
          v_error[t] := coalesce(v_error[t] || '; ', '') || 'write: ' || SQLERRM;
        END;
      END LOOP;
    END;

    -- Committed on each target that answered (PL/Proxy's autocommit): its
    -- cursors may move. Should this transaction not commit, the rows are
    -- written again next time, which changes nothing.
    FOR t IN 1 .. cardinality(v_name) LOOP
      CONTINUE WHEN NOT v_up[t] OR NOT v_took_all ? v_name[t];
      SELECT x.taken, x.refused, x.errors INTO v_took
      FROM jsonb_to_record(v_took_all -> v_name[t]) AS x(taken integer, refused integer, errors text);
      v_copied[t] := v_copied[t] + v_took.taken;
      IF v_took.refused > 0 THEN
        RAISE WARNING 'mailroom_fleet: sync_suppressions: % refused % row(s): %', v_name[t], v_took.refused, v_took.errors;
        v_error[t] := coalesce(v_error[t] || '; ', '') || format('refused %s row(s): %s', v_took.refused, v_took.errors);
      END IF;
    END LOOP;
    v_full := false;
    FOR v_last IN
      SELECT DISTINCT ON (x.shard) x.shard, x.n, x.written_xid, x.address_key, coalesce(x.stream, '') AS stream
      FROM jsonb_to_recordset(v_rows) AS x(shard text, n bigint, written_xid xid8, address_key text, stream text)
      ORDER BY x.shard, x.n DESC
    LOOP
      s := array_position(v_name, v_last.shard);
      v_pulled[s] := v_pulled[s] + v_last.n;
      v_full := v_full OR v_last.n >= p_page;
      INSERT INTO mailroom_fleet.suppression_cursors AS c
        (source, target, after_xid, after_key, after_stream, copied, synced_at)
      SELECT v_last.shard, v_name[g.i], v_last.written_xid, v_last.address_key, v_last.stream, v_last.n, now()
      FROM generate_subscripts(v_name, 1) AS g(i)
      WHERE g.i <> s AND v_up[g.i] AND v_took_all ? v_name[g.i]
      ON CONFLICT (source, target) DO UPDATE
        SET after_xid = EXCLUDED.after_xid, after_key = EXCLUDED.after_key,
            after_stream = EXCLUDED.after_stream, copied = c.copied + EXCLUDED.copied, synced_at = now();
    END LOOP;
    EXIT WHEN NOT v_full OR v_round >= 1000;
  END LOOP;

  DELETE FROM mailroom_fleet.suppression_sync_runs r WHERE r.finished_at < now() - interval '7 days';
  INSERT INTO mailroom_fleet.suppression_sync_runs (started_at, finished_at, complete, shards, unreached, rows_read, errors)
  VALUES (v_started, clock_timestamp(),
          cardinality(v_unreached) = 0 AND NOT false = ANY (v_up) AND array_to_string(v_error, '') = '',
          cardinality(v_name), v_unreached, v_read,
          nullif(concat_ws('; ', CASE WHEN cardinality(v_unreached) > 0 THEN format('partitions %s not reached', v_unreached) END,
                           nullif(array_to_string(ARRAY(SELECT v_name[i] || ': ' || v_error[i]
                                                        FROM generate_subscripts(v_name, 1) i
                                                        WHERE v_error[i] IS NOT NULL), '; '), '')), ''));

  FOR s IN 1 .. cardinality(v_name) LOOP
    shard := v_name[s];
    partitions := (SELECT array_agg(m.partition ORDER BY m.partition) FROM mailroom_fleet.shard_map m
                   WHERE m.connstr = (SELECT m2.connstr FROM mailroom_fleet.shard_map m2 WHERE m2.partition = v_part[s]));
    reached := v_up[s]; pulled := v_pulled[s]; copied := v_copied[s]; error := v_error[s];
    RETURN NEXT;
  END LOOP;
END
$$;
ALTER FUNCTION mailroom_fleet.sync_suppressions(integer) OWNER TO mailroom_fleet_owner;
REVOKE ALL ON FUNCTION mailroom_fleet.sync_suppressions(integer) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION mailroom_fleet.sync_suppressions(integer) TO mailroom_fleet_operator;
COMMENT ON FUNCTION mailroom_fleet.sync_suppressions(integer) IS
  'Write every shard''s new suppressions to every other shard (mailroom.suppress there: address, reason and stream kept, source "fleet copy from <shard>: ..."), p_page rows per shard and call, one PL/Proxy call to read all shards and one to write the union, from a cursor per pair of shards that moves only once the target took the rows. One row per shard: reached (and still answering at the end) or not (then its partitions and the error), rows read from it (pulled), rows it took (copied), errors (a refused row: a stream it does not define). A partial run is recorded in suppression_sync_runs; a shard not reached keeps its cursors and is caught up by a later run. Run by the pg_cron job mailroom-fleet-suppression-sync every minute.';

COMMIT;
