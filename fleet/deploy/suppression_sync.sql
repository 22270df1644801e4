-- Deploy mailroom_fleet:suppression_sync to pg
-- requires: suppress

-- A suppression a shard writes itself (a bounce mark_outcomes or
-- record_feedback saw, a complaint, an unsubscribe, an operator's suppress
-- there) must stop mail to that address on every shard: mail to it may be
-- on any of them. sync_suppressions() copies each shard's new suppressions
-- to every other shard with that shard's own mailroom.suppress (same
-- address, reason and stream scope; source "fleet copy from <shard>: <its
-- source>"), which is idempotent: the first reason per scope stays, a row
-- already there changes nothing. The pg_cron job
-- mailroom-fleet-suppression-sync runs it every minute; anybody holding
-- mailroom_fleet_operator may run it at once.
--
-- Each ordered pair of shards (source, target) has its own cursor here: the
-- last source row copied to that target, in the order of the shard's
-- mailroom.suppressions_written (the writing transaction's xid8, then key
-- and stream; only rows of transactions that ended before any still open
-- one began, so a row committed after a later-started one is not passed
-- over: deploy/suppression_feed.sql). A cursor moves only after its rows
-- were committed on the target, so a shard that does not answer keeps its
-- cursors as a source and as a target, the other pairs go on, and it
-- catches up when it answers again. A shard the directory has not seen
-- before starts from the beginning: it gets the whole list of every shard.
--
-- Copies are read back too (they are suppressions of their shard) and
-- copied on, where they change nothing: one extra no-op suppress per copy
-- and shard, the price of a rule with no exception a writer could spell.
-- Lifts (unsuppress) are not copied: a suppression lifted on one shard
-- stays on the others (and a copy may bring it back); lift with
-- mailroom_fleet.unsuppress, which lifts it on every shard at once.

BEGIN;

CREATE TABLE mailroom_fleet.suppression_cursors (
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
  'Per ordered pair of shards (by database name): the last suppression of source copied to target (its position in mailroom.suppressions_written: written_xid, address_key, stream or ''''), how many were copied so far and when last. No row: nothing copied yet (a new shard starts from the beginning). Delete the rows of a shard restored from a backup: it is read again from the start (idempotent).';

CREATE FUNCTION mailroom_fleet._shard_name(p_partition integer)
RETURNS text
LANGUAGE plproxy
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
  CLUSTER 'mailroom_fleet';
  RUN ON p_partition;
  SELECT pg_catalog.current_database()::text;
$$;

CREATE FUNCTION mailroom_fleet._suppressions_written(p_partition integer, p_after_xid xid8, p_after_key text,
                                                     p_after_stream text, p_limit integer)
RETURNS TABLE (written_xid xid8, address_key text, address text, reason text, source text, stream text)
LANGUAGE plproxy
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
  CLUSTER 'mailroom_fleet';
  RUN ON p_partition;
  SELECT w.written_xid, w.address_key, w.address, w.reason, w.source, w.stream
  FROM mailroom.suppressions_written(p_after_xid, p_after_key, p_after_stream, p_limit) AS w;
$$;

CREATE FUNCTION mailroom_fleet._suppress_copies(p_partition integer, p_addresses text[], p_reasons text[],
                                                p_sources text[], p_streams text[])
RETURNS integer
LANGUAGE plproxy
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
  CLUSTER 'mailroom_fleet';
  RUN ON p_partition;
  SELECT pg_catalog.count(*)::pg_catalog.int4
  FROM ROWS FROM (pg_catalog.unnest(p_addresses), pg_catalog.unnest(p_reasons), pg_catalog.unnest(p_sources),
                 pg_catalog.unnest(p_streams)) AS r(address, reason, source, stream)
  CROSS JOIN LATERAL mailroom.suppress(r.address, r.reason, r.source, r.stream) AS s;
$$;

DO $$
DECLARE
  v_fn text;
BEGIN
  FOREACH v_fn IN ARRAY ARRAY['_shard_name(integer)', '_suppressions_written(integer, xid8, text, text, integer)',
                              '_suppress_copies(integer, text[], text[], text[], text[])'] LOOP
    EXECUTE format('ALTER FUNCTION mailroom_fleet.%s OWNER TO mailroom_fleet_owner', v_fn);
    EXECUTE format('REVOKE ALL ON FUNCTION mailroom_fleet.%s FROM PUBLIC', v_fn);
    EXECUTE format('COMMENT ON FUNCTION mailroom_fleet.%s IS %L', v_fn,
                   'Internal (sync_suppressions): one call on partition p_partition''s shard.');
  END LOOP;
END
$$;

CREATE FUNCTION mailroom_fleet.sync_suppressions(p_page integer DEFAULT 1000)
RETURNS TABLE (shard text, partitions integer[], reached boolean, pulled bigint, copied bigint, error text)
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
  v_part    integer[] := '{}';   -- per shard reached: the partition its calls go to
  v_name    text[] := '{}';
  v_pulled  bigint[] := '{}';
  v_copied  bigint[] := '{}';
  v_error   text[] := '{}';
  v_group   record;
  v_one     text;
  v_xid     xid8;                -- the pair's cursor
  v_key     text;
  v_stream  text;
  v_page    record;
  s         integer;
  t         integer;
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
      v_pulled := v_pulled || 0::bigint;
      v_copied := v_copied || 0::bigint;
      v_error := v_error || NULL::text;
      shard := v_one; partitions := v_group.parts; reached := true;
    EXCEPTION WHEN OTHERS THEN
      RAISE WARNING 'mailroom_fleet: sync_suppressions: partitions % not reached: %', v_group.parts, SQLERRM;
      shard := NULL; partitions := v_group.parts; reached := false; pulled := 0; copied := 0; error := SQLERRM;
      RETURN NEXT;   -- the shards not reached first; those reached once their counts are known
    END;
  END LOOP;

  FOR s IN 1 .. cardinality(v_name) LOOP
    FOR t IN 1 .. cardinality(v_name) LOOP
      CONTINUE WHEN s = t;
      v_xid := NULL; v_key := NULL; v_stream := NULL;
      SELECT c.after_xid, c.after_key, c.after_stream INTO v_xid, v_key, v_stream
      FROM mailroom_fleet.suppression_cursors c WHERE c.source = v_name[s] AND c.target = v_name[t];
      LOOP
        BEGIN
          -- One page of the source, in its own order (WITH ORDINALITY: the
          -- shard's, whose collation the cursor is compared in).
          SELECT count(*) AS n,
                 array_agg(w.address ORDER BY w.n) AS addresses,
                 array_agg(w.reason ORDER BY w.n) AS reasons,
                 array_agg(CASE WHEN w.source LIKE 'fleet copy from %' THEN w.source
                                ELSE left('fleet copy from ' || v_name[s] || coalesce(': ' || w.source, ''), 200) END
                           ORDER BY w.n) AS sources,
                 array_agg(w.stream ORDER BY w.n) AS streams,
                 (array_agg(w.written_xid ORDER BY w.n DESC))[1] AS last_xid,
                 (array_agg(w.address_key ORDER BY w.n DESC))[1] AS last_key,
                 (array_agg(coalesce(w.stream, '') ORDER BY w.n DESC))[1] AS last_stream
          INTO v_page
          FROM mailroom_fleet._suppressions_written(v_part[s], v_xid, v_key, v_stream, p_page)
               WITH ORDINALITY AS w(written_xid, address_key, address, reason, source, stream, n);
          EXIT WHEN v_page.n = 0;
          v_pulled[s] := v_pulled[s] + v_page.n;
          PERFORM mailroom_fleet._suppress_copies(v_part[t], v_page.addresses, v_page.reasons, v_page.sources,
                                                  v_page.streams);
          -- Committed on the target (PL/Proxy's autocommit): the cursor may
          -- move. Should this transaction not commit, the page is copied
          -- again next time, which changes nothing.
          INSERT INTO mailroom_fleet.suppression_cursors AS c
            (source, target, after_xid, after_key, after_stream, copied, synced_at)
          VALUES (v_name[s], v_name[t], v_page.last_xid, v_page.last_key, v_page.last_stream, v_page.n, now())
          ON CONFLICT (source, target) DO UPDATE
            SET after_xid = EXCLUDED.after_xid, after_key = EXCLUDED.after_key,
                after_stream = EXCLUDED.after_stream, copied = c.copied + EXCLUDED.copied, synced_at = now();
          v_copied[t] := v_copied[t] + v_page.n;
          v_xid := v_page.last_xid; v_key := v_page.last_key; v_stream := v_page.last_stream;
          EXIT WHEN v_page.n < p_page;
        EXCEPTION WHEN OTHERS THEN
          RAISE WARNING 'mailroom_fleet: sync_suppressions: copying % to % stopped: %', v_name[s], v_name[t], SQLERRM;
          v_error[t] := coalesce(v_error[t] || '; ', '') || format('from %s: %s', v_name[s], SQLERRM);
          EXIT;
        END;
      END LOOP;
    END LOOP;
  END LOOP;

  FOR s IN 1 .. cardinality(v_name) LOOP
    shard := v_name[s];
    partitions := (SELECT array_agg(m.partition ORDER BY m.partition) FROM mailroom_fleet.shard_map m
                   WHERE m.connstr = (SELECT m2.connstr FROM mailroom_fleet.shard_map m2 WHERE m2.partition = v_part[s]));
    reached := true; pulled := v_pulled[s]; copied := v_copied[s]; error := v_error[s];
    RETURN NEXT;
  END LOOP;
END
$$;
ALTER FUNCTION mailroom_fleet.sync_suppressions(integer) OWNER TO mailroom_fleet_owner;
REVOKE ALL ON FUNCTION mailroom_fleet.sync_suppressions(integer) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION mailroom_fleet.sync_suppressions(integer) TO mailroom_fleet_operator;
COMMENT ON FUNCTION mailroom_fleet.sync_suppressions(integer) IS
  'Copy every shard''s new suppressions to every other shard (mailroom.suppress there: address, reason and stream kept, source "fleet copy from <shard>: ..."), p_page rows per call, from a cursor per pair of shards that moves only once the target committed them. One row per shard: reached or not (then its partitions and the error), rows read from it (pulled) and copied to it, and the first error of a pair it is the target of. A shard not reached keeps its cursors and catches up later; run by the pg_cron job mailroom-fleet-suppression-sync every minute.';

-- Every minute, where this database is pg_cron's (cron.database_name);
-- elsewhere the job is made from the cron database (docs/fleet.md).
DO $$
BEGIN
  IF EXISTS (SELECT FROM pg_catalog.pg_extension WHERE extname = 'pg_cron') THEN
    PERFORM cron.schedule('mailroom-fleet-suppression-sync', '* * * * *',
                          'SELECT count(*) FROM mailroom_fleet.sync_suppressions()');
  ELSE
    RAISE NOTICE 'mailroom_fleet: pg_cron is not installed in this database: schedule mailroom_fleet.sync_suppressions() from the cron database (docs/fleet.md)';
  END IF;
END
$$;

COMMIT;
