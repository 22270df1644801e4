-- Deploy mailroom_fleet:suppression_sync to pg
-- requires: suppress

-- A suppression a shard writes itself (a bounce mark_outcomes saw, a
-- complaint record_feedback saw, an unsubscribe, an operator's suppress
-- there) must stop mail to that address on every shard: mail to it may be
-- on any of them. sync_suppressions() reads every shard's new suppressions
-- and writes their union to every shard, each row through that shard's own
-- mailroom.suppress (mailroom.suppress_copies: same address, reason and
-- stream scope; source "fleet copy from <shard>: <its source>"; a shard
-- skips the rows it wrote), which is idempotent: the first reason per scope
-- stays, a row already there changes nothing. The pg_cron job
-- mailroom-fleet-suppression-sync runs it every minute; anybody holding
-- mailroom_fleet_operator may run it at once.
--
-- Calls: one PL/Proxy call reads all shards at once and one writes the
-- union to all at once (SPLIT over one partition per shard: each shard
-- runs it once, in parallel), per page of p_page rows per shard; not one
-- call per pair of shards. When a shard does not answer, the others are
-- served one call each, the run is recorded partial in
-- suppression_sync_runs (and its row reached = false), and the next run
-- that reaches it completes it.
--
-- Positions: each ordered pair of shards (source, target) has a cursor
-- here, the last source row the target took, in the order of the source's
-- mailroom.suppressions_written (the writing transaction's xid8, then key
-- and stream; only rows of transactions below the shard's snapshot xmin,
-- so a row committed after a later-started one is not passed over:
-- deploy/suppression_feed.sql). A source is read from the lowest cursor of
-- the targets reached (when they differ, from the start of the lowest xid:
-- keys are compared in the shard's collation, never here), so a target that
-- was down is caught up without holding the others back; a cursor moves
-- only once its target took the rows. A shard the directory has not seen
-- before starts from the beginning: it gets the whole list of every shard.
--
-- Copies are read back too (they are suppressions of their shard) but
-- written on only when their origin is not among the shards read in the
-- run: the origin's own row reaches every shard, so writing its copies on
-- as well offered each suppression to every shard once more from each of
-- the others, (shards - 1)^2 no-op suppress calls per suppression, which
-- at 32 shards is most of a shard's sync work. When the origin is down or
-- gone, the copies still carry what it wrote to a shard it had not reached.
-- Lifts (unsuppress) are not copied: a suppression lifted on one
-- shard stays on the others; lift with mailroom_fleet.unsuppress, which
-- lifts it on every shard at once (and no copy brings it back: the copies
-- were read before).

BEGIN;

-- Over v0.5.0's tables (this is a rework): IF NOT EXISTS skips them
-- without a notice in the DBA's deploy output.
SET LOCAL client_min_messages = warning;

CREATE TABLE IF NOT EXISTS mailroom_fleet.suppression_cursors (
  source       text NOT NULL,
  target       text NOT NULL,
  after_xid    xid8 NOT NULL,
  after_key    text NOT NULL,
  after_stream text NOT NULL,
  copied       bigint NOT NULL DEFAULT 0,
  synced_at    timestamptz NOT NULL DEFAULT now(),
  PRIMARY KEY (source, target)
);
ALTER TABLE mailroom_fleet.suppression_cursors OWNER TO mailroom_fleet_owner;
REVOKE ALL ON mailroom_fleet.suppression_cursors FROM PUBLIC;
GRANT SELECT ON mailroom_fleet.suppression_cursors TO mailroom_fleet_operator;
COMMENT ON TABLE mailroom_fleet.suppression_cursors IS
  'Per ordered pair of shards (by database name): the last suppression of source that target took (its position in mailroom.suppressions_written: written_xid, address_key, stream or ''''), how many rows so far and when last. No row: nothing copied yet (a new shard starts from the beginning). Delete the rows of a shard restored from a backup: it is read and written again from the start (idempotent).';

CREATE TABLE IF NOT EXISTS mailroom_fleet.suppression_sync_runs (
  id          bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
  started_at  timestamptz NOT NULL,
  finished_at timestamptz NOT NULL,
  complete    boolean NOT NULL,
  shards      integer NOT NULL,
  unreached   integer[] NOT NULL,
  rows_read   bigint NOT NULL,
  errors      text
);
ALTER TABLE mailroom_fleet.suppression_sync_runs OWNER TO mailroom_fleet_owner;
REVOKE ALL ON mailroom_fleet.suppression_sync_runs FROM PUBLIC;
GRANT SELECT ON mailroom_fleet.suppression_sync_runs TO mailroom_fleet_operator;
COMMENT ON TABLE mailroom_fleet.suppression_sync_runs IS
  'One row per sync_suppressions run (kept 7 days): complete = every shard reached and every row taken by every shard; else the partitions not reached (unreached) and the errors. The newest complete run bounds the lag.';

CREATE OR REPLACE FUNCTION mailroom_fleet._shard_name(p_partition integer)
RETURNS text
LANGUAGE plproxy
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
  CLUSTER 'mailroom_fleet';
  RUN ON p_partition;
  SELECT pg_catalog.current_database()::text;
$$;

-- Each shard of p_parts (one partition per shard) reads from its own
-- position: the element of the arrays at its database name.
CREATE OR REPLACE FUNCTION mailroom_fleet._suppressions_new(p_parts integer[], p_names text[], p_xids xid8[],
                                                 p_keys text[], p_streams text[], p_limit integer)
RETURNS TABLE (shard text, n bigint, written_xid xid8, address_key text, address text, reason text,
               source text, stream text)
LANGUAGE plproxy
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
  CLUSTER 'mailroom_fleet';
  SPLIT p_parts;
  RUN ON p_parts;
  SELECT pg_catalog.current_database()::text AS shard, w.n, w.written_xid, w.address_key, w.address, w.reason,
         w.source, w.stream
  FROM mailroom.suppressions_written((p_xids)[pg_catalog.array_position(p_names, pg_catalog.current_database()::text)],
                                     (p_keys)[pg_catalog.array_position(p_names, pg_catalog.current_database()::text)],
                                     (p_streams)[pg_catalog.array_position(p_names, pg_catalog.current_database()::text)],
                                     p_limit)
       WITH ORDINALITY AS w(written_xid, address_key, address, reason, source, stream, created_at, n);
$$;

-- The same union to each shard of p_parts.
CREATE OR REPLACE FUNCTION mailroom_fleet._suppress_copies(p_parts integer[], p_origins text[], p_addresses text[],
                                                p_reasons text[], p_sources text[], p_streams text[])
RETURNS TABLE (shard text, taken integer, refused integer, errors text)
LANGUAGE plproxy
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
  CLUSTER 'mailroom_fleet';
  SPLIT p_parts;
  RUN ON p_parts;
  SELECT pg_catalog.current_database()::text AS shard, c.taken, c.refused, c.errors
  FROM mailroom.suppress_copies(p_origins, p_addresses, p_reasons, p_sources, p_streams) AS c;
$$;

DO $$
DECLARE
  v_fn text;
BEGIN
  FOREACH v_fn IN ARRAY ARRAY['_shard_name(integer)',
                              '_suppressions_new(integer[], text[], xid8[], text[], text[], integer)',
                              '_suppress_copies(integer[], text[], text[], text[], text[], text[])'] LOOP
    EXECUTE format('ALTER FUNCTION mailroom_fleet.%s OWNER TO mailroom_fleet_owner', v_fn);
    EXECUTE format('REVOKE ALL ON FUNCTION mailroom_fleet.%s FROM PUBLIC', v_fn);
    EXECUTE format('COMMENT ON FUNCTION mailroom_fleet.%s IS %L', v_fn,
                   'Internal (sync_suppressions): one call on each shard of p_parts (or partition p_partition).');
  END LOOP;
END
$$;

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
           array_agg(CASE WHEN x.origin IS NOT NULL THEN x.source
                          ELSE left('fleet copy from ' || x.shard || coalesce(': ' || x.source, ''), 200) END
                     ORDER BY x.shard, x.n) AS sources,
           array_agg(x.stream ORDER BY x.shard, x.n) AS streams
    INTO v_union
    FROM jsonb_to_recordset(v_rows) AS r(shard text, n bigint, address text, reason text, source text, stream text),
         LATERAL (SELECT r.*, substring(r.source FROM '^fleet copy from ([^:]+)') AS origin) AS x
    WHERE x.origin IS NULL
       OR NOT x.origin = ANY (ARRAY(SELECT v_name[i] FROM generate_subscripts(v_name, 1) i WHERE v_up[i]));

    -- Nothing to write (every row a copy whose origin was read): each
    -- target answering took nothing, so the cursors move past the copies.
    IF v_union.addresses IS NULL THEN
      v_took_all := (SELECT jsonb_object_agg(v_name[i], jsonb_build_object('taken', 0, 'refused', 0, 'errors', NULL))
                     FROM generate_subscripts(v_name, 1) i WHERE v_up[i]);
    ELSE
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
    END IF;

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

-- Every minute, where this database is pg_cron's (cron.database_name);
-- elsewhere the job is made from the cron database (docs/fleet.md).
DO $$
BEGIN
  IF EXISTS (SELECT FROM pg_catalog.pg_extension WHERE extname = 'pg_cron') THEN
    PERFORM cron.schedule('mailroom-fleet-suppression-sync', '* * * * *',
                          'SELECT count(*) FROM mailroom_fleet.sync_suppressions()');
  ELSE
    RAISE NOTICE 'mailroom_fleet: pg_cron is not installed in this database: schedule mailroom_fleet.sync_suppressions() every minute from the cron database (docs/fleet.md)';
  END IF;
END
$$;

COMMIT;
