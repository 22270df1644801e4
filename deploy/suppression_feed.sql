-- Deploy mailroom:suppression_feed to pg
-- requires: streams
-- requires: suppression_search_indexes
-- requires: address_wire_form
-- requires: suppress

-- The suppressions a shard wrote, in an order a reader can resume from
-- without missing one: the fleet's directory copies every shard's new
-- suppressions to every other shard (fleet/deploy/suppression_sync.sql,
-- docs/fleet.md), each pair of shards from its own cursor.
--
-- Neither created_at (now(): the transaction's start) nor any sequence is
-- in commit order: a transaction that started first and commits last writes
-- a row below a cursor that a reader already moved past, and that row is
-- never read (tests/test_fleet_suppression_sync.py shows it). So each row
-- carries the id of the transaction that wrote it (written_xid, a 64-bit
-- xid8 that never wraps), and suppressions_written hands out only rows
-- written by transactions below its snapshot's xmin: every transaction below
-- that has ended, so no row can still appear below a position once a reader
-- was given it. Rows of a transaction still open wait until it ends (the
-- propagation delay is the age of the oldest open transaction that wrote
-- anything on the shard; idle_in_transaction_session_timeout bounds it).
--
-- Rows from before this change get written_xid 0 and come first: a first
-- read hands out the whole list.

BEGIN;

ALTER TABLE mailroom.suppressions ADD COLUMN written_xid xid8 NOT NULL DEFAULT '0';
ALTER TABLE mailroom.suppressions ALTER COLUMN written_xid SET DEFAULT pg_current_xact_id();
COMMENT ON COLUMN mailroom.suppressions.written_xid IS
  'The transaction that wrote the row (0 for rows older than suppression_feed): suppressions_written''s order.';

-- The feed's order; one entry more per suppression (written rarely, by
-- unsubscribes, bounces, complaints and operators).
CREATE INDEX suppressions_written_idx ON mailroom.suppressions (written_xid, address_key, (coalesce(stream, '')));

CREATE FUNCTION mailroom.suppressions_written(
  p_after_xid    xid8,
  p_after_key    text,
  p_after_stream text,
  p_limit        integer DEFAULT 1000
)
RETURNS TABLE (written_xid xid8, address_key text, address text, reason text, source text, stream text,
               created_at timestamptz)
LANGUAGE plpgsql STABLE
SECURITY DEFINER
SET search_path = mailroom, pg_temp
AS $$
BEGIN
  IF p_limit IS NULL OR p_limit < 1 OR p_limit > 100000 THEN
    RAISE EXCEPTION 'mailroom: limit: must be between 1 and 100000, got %', coalesce(p_limit::text, 'NULL')
      USING ERRCODE = '22023';
  END IF;
  IF p_after_xid IS NOT NULL AND (p_after_key IS NULL OR p_after_stream IS NULL) THEN
    RAISE EXCEPTION 'mailroom: after: a position is (xid, address key, stream or ''''), all three or none'
      USING ERRCODE = '22023';
  END IF;
  -- One statement, so one snapshot: the horizon and the rows it lets out
  -- are read together.
  RETURN QUERY
  SELECT s.written_xid, s.address_key, s.address, s.reason, s.source, s.stream, s.created_at
  FROM mailroom.suppressions s
  WHERE s.written_xid < pg_snapshot_xmin(pg_current_snapshot())
    AND (p_after_xid IS NULL
         OR (s.written_xid, s.address_key, coalesce(s.stream, '')) > (p_after_xid, p_after_key, p_after_stream))
  ORDER BY s.written_xid, s.address_key, coalesce(s.stream, '')
  LIMIT p_limit;
END
$$;
ALTER FUNCTION mailroom.suppressions_written(xid8, text, text, integer) OWNER TO mailroom_owner;
REVOKE ALL ON FUNCTION mailroom.suppressions_written(xid8, text, text, integer) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION mailroom.suppressions_written(xid8, text, text, integer) TO mailroom_operator;
COMMENT ON FUNCTION mailroom.suppressions_written(xid8, text, text, integer) IS
  'The suppressions after the position (p_after_xid, p_after_key, p_after_stream: the last row read, its stream NULL as ''''; all NULL: from the start), at most p_limit (1..100000), in the order (written_xid, address_key, stream). Only rows of transactions that ended before any still open one started: resuming after the last row read misses none, however the writers'' commits were ordered.';

-- The write half of the fleet's sync: every shard's new suppressions, in
-- one call per shard (the directory sends the same union to all, RUN ON
-- ALL). Each row through mailroom.suppress (the first reason per scope
-- stays: a row already here changes nothing); the rows this shard wrote
-- itself (p_origins, by database name) are skipped. A row this shard
-- refuses (a stream it does not define) is counted and its error kept,
-- without its address (no addresses in the directory's log), and the
-- others are written: one bad row does not hold the sync back.
CREATE FUNCTION mailroom.suppress_copies(
  p_origins   text[],
  p_addresses text[],
  p_reasons   text[],
  p_sources   text[],
  p_streams   text[]
)
RETURNS TABLE (taken integer, refused integer, errors text)
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = mailroom, pg_temp
AS $$
DECLARE
  v_n      integer := coalesce(cardinality(p_addresses), 0);
  v_errors text[] := '{}';
  i        integer;
BEGIN
  IF coalesce(cardinality(p_origins), 0) <> v_n OR coalesce(cardinality(p_reasons), 0) <> v_n
     OR coalesce(cardinality(p_sources), 0) <> v_n OR coalesce(cardinality(p_streams), 0) <> v_n THEN
    RAISE EXCEPTION 'mailroom: suppress_copies: origins, addresses, reasons, sources and streams must be arrays of one length, got %, %, %, %, %',
      cardinality(p_origins), cardinality(p_addresses), cardinality(p_reasons), cardinality(p_sources), cardinality(p_streams)
      USING ERRCODE = '22023';
  END IF;
  taken := 0; refused := 0;
  FOR i IN 1 .. v_n LOOP
    CONTINUE WHEN p_origins[i] = current_database();
    BEGIN
      PERFORM mailroom.suppress(p_addresses[i], p_reasons[i], p_sources[i], p_streams[i]);
      taken := taken + 1;
    EXCEPTION WHEN OTHERS THEN
      refused := refused + 1;
      IF NOT SQLERRM = ANY (v_errors) THEN
        v_errors := v_errors || SQLERRM;
      END IF;
    END;
  END LOOP;
  errors := nullif(array_to_string(v_errors, '; '), '');
  RETURN NEXT;
END
$$;
ALTER FUNCTION mailroom.suppress_copies(text[], text[], text[], text[], text[]) OWNER TO mailroom_owner;
REVOKE ALL ON FUNCTION mailroom.suppress_copies(text[], text[], text[], text[], text[]) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION mailroom.suppress_copies(text[], text[], text[], text[], text[]) TO mailroom_operator;
COMMENT ON FUNCTION mailroom.suppress_copies(text[], text[], text[], text[], text[]) IS
  'The fleet''s suppression sync writes here: each row (origin database, address, reason, source, stream) through mailroom.suppress, except the rows whose origin is this database. Returns how many were taken (already there counts), how many refused (an unknown stream here, a bad reason) and their distinct errors, without addresses.';

COMMIT;
