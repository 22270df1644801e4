-- Deploy mailroom:campaign_chunks to pg
-- requires: table_campaign_backlog
-- requires: split_messages
-- requires: function_next_window_opening
-- requires: streams

-- A campaign's queue rows are made lazily, a chunk at a time
-- (mailroom.campaign_backlog says what is left): enqueue_campaign writes the
-- contents rows and queues the first chunk itself, so the first mail can be
-- claimed as soon as it commits; claim_batch calls _campaign_top_up once per
-- claim, which queues a campaign's next chunk when the newest one runs low.
-- This is how listmonk walks a subscriber list (a last-id cursor, batches),
-- and how schedules already materialise (deploy/materialize_schedules.sql).
--
-- What is decided when a mail is queued moved here from enqueue_campaign:
-- a malformed address or an address suppressed at this moment finishes the
-- mail as cancelled (one ledger row, as enqueue_campaign wrote before) and
-- the send window gives its run_at. claim_batch's gate still decides
-- everything again when the mail is claimed.
--
-- Concurrency: the backlog row is the chunk's lock. Claimers take it with
-- SKIP LOCKED (no claim waits for another's chunk) and check that the cursor
-- has not moved since they read it, so no chunk is queued twice (and the
-- queue's primary key would refuse it). enqueue_campaign holds the same row
-- for its whole transaction, so a chunk never passes over a campaign's mail
-- that is written but not committed yet; cancel_campaign waits for it too.

BEGIN;

-- Queue the next chunk of one campaign: its next p_size contents rows above
-- the cursor. The caller holds the campaign's backlog row (FOR UPDATE).
-- Returns how many mails it took (queued or finished).
CREATE FUNCTION mailroom._campaign_queue_chunk(p_campaign bigint, p_size integer, p_now timestamptz)
RETURNS integer
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = mailroom, pg_temp
AS $$
DECLARE
  v_c       mailroom.campaigns%ROWTYPE;
  v_through bigint;
  v_taken   integer;
  v_first_id bigint;
  v_last    bigint;
  v_middle  bigint;
  v_queued  integer;
  v_settled integer;
  v_due     boolean;
  v_first   timestamptz;
BEGIN
  SELECT b.queued_through INTO v_through FROM mailroom.campaign_backlog b WHERE b.campaign_id = p_campaign;
  IF NOT FOUND THEN
    RETURN 0;
  END IF;
  SELECT * INTO v_c FROM mailroom.campaigns WHERE id = p_campaign;

  WITH next AS MATERIALIZED (
    -- contents_campaign_idx (campaign_id, id): the next range of the index
    SELECT c.id, c.to_address, c.recipient_zone, c.stream, c.priority, c.sender, c.max_attempts, c.on_ambiguous,
           row_number() OVER (ORDER BY c.id) AS n,
           CASE WHEN NOT mailroom._address_ok(c.to_address) THEN 'invalid_address'
                WHEN EXISTS (SELECT FROM mailroom.suppressions s
                             WHERE s.address_key = mailroom._address_key(c.to_address)
                               AND (s.stream IS NULL OR s.stream = c.stream)) THEN 'suppressed' END AS reason,
           -- finished already: cancelled by an operator before it was queued
           EXISTS (SELECT FROM mailroom.attempts f WHERE f.message_id = c.id AND f.finished_as IS NOT NULL) AS finished
    FROM mailroom.contents c
    WHERE c.campaign_id = p_campaign AND c.id > v_through
    ORDER BY c.id
    LIMIT p_size
  ),
  -- The send window once per zone, from now (or send_at if later): an
  -- opening computed from an old send_at could be one that has closed.
  openings AS (
    SELECT z.zone, mailroom._window_open(z.zone, v_c.window_start, v_c.window_end, greatest(v_c.send_at, p_now)) AS run_at
    FROM (SELECT DISTINCT k.recipient_zone AS zone FROM next k WHERE v_c.window_start IS NOT NULL) z
  ),
  live AS (
    INSERT INTO mailroom.queue (id, status, status_reason, priority, run_at, sender, campaign_id, max_attempts,
                                on_ambiguous, updated_at)
    SELECT k.id, CASE WHEN v_c.status = 'paused' THEN 'paused' ELSE 'queued' END,
           CASE WHEN v_c.status = 'paused' THEN 'campaign_paused' END, k.priority,
           coalesce(o.run_at, v_c.send_at), k.sender, p_campaign, k.max_attempts, k.on_ambiguous, p_now
    FROM next k
    LEFT JOIN openings o ON o.zone = k.recipient_zone
    WHERE k.reason IS NULL AND NOT k.finished
    RETURNING run_at
  ),
  cancelled AS (
    INSERT INTO mailroom.attempts (message_id, attempt, finished_at, outcome, finished_as, status_reason)
    SELECT k.id, 0, p_now, 'cancelled', 'cancelled', k.reason
    FROM next k
    WHERE k.reason IS NOT NULL AND NOT k.finished
  )
  SELECT (SELECT count(*) FROM next), (SELECT min(k.id) FROM next k), (SELECT max(k.id) FROM next k),
         (SELECT k.id FROM next k WHERE k.n = (p_size + 1) / 2),
         (SELECT count(*) FROM live), (SELECT bool_or(l.run_at <= p_now) FROM live l),
         (SELECT min(l.run_at) FROM live l),
         (SELECT count(*) FROM next k WHERE NOT k.finished)
    INTO v_taken, v_first_id, v_last, v_middle, v_queued, v_due, v_first, v_settled;

  IF v_taken < p_size THEN
    -- Nothing above: the whole campaign is queued (a re-run of
    -- enqueue_campaign makes a new backlog row for what it adds).
    DELETE FROM mailroom.campaign_backlog WHERE campaign_id = p_campaign;
  ELSE
    UPDATE mailroom.campaign_backlog
    SET queued_through = v_last,
        chunk_first = v_first_id,
        chunk_middle = v_middle,
        -- queued now or finished for its address; mail an operator cancelled
        -- before its chunk was taken off the count by mailroom.cancel
        unqueued = greatest(unqueued - v_settled, 0),
        -- nothing of this chunk is due (send windows, send_at): no next chunk
        -- before its first mail is, or every claim would queue more waiting mail
        not_before = CASE WHEN v_queued > 0 AND NOT v_due THEN v_first ELSE '-infinity' END,
        updated_at = p_now
    WHERE campaign_id = p_campaign;
  END IF;
  IF v_due AND v_c.status = 'active' THEN
    PERFORM pg_notify('mailroom', v_c.sender);
  END IF;
  RETURN v_taken;
END
$$;
ALTER FUNCTION mailroom._campaign_queue_chunk(bigint, integer, timestamptz) OWNER TO mailroom_owner;
REVOKE ALL ON FUNCTION mailroom._campaign_queue_chunk(bigint, integer, timestamptz) FROM PUBLIC;
COMMENT ON FUNCTION mailroom._campaign_queue_chunk(bigint, integer, timestamptz) IS
  'Internal (caller holds the campaign''s backlog row): queue the campaign''s next p_size mails above its cursor (send window applied; malformed or suppressed addresses finished as cancelled), move the cursor, drop the backlog row once nothing is left. Returns how many mails it took.';

-- How many mails a chunk holds: enough that a drain of four runners
-- claiming 50 queues one every 25 claims, few enough that the claim which
-- queues it stays a short transaction (about 30 ms).
CREATE FUNCTION mailroom._campaign_chunk_size()
RETURNS integer
LANGUAGE sql IMMUTABLE
SECURITY DEFINER
SET search_path = mailroom, pg_temp
AS $$ SELECT 5000 $$;
ALTER FUNCTION mailroom._campaign_chunk_size() OWNER TO mailroom_owner;
REVOKE ALL ON FUNCTION mailroom._campaign_chunk_size() FROM PUBLIC;
COMMENT ON FUNCTION mailroom._campaign_chunk_size() IS
  'Internal: how many mails one chunk of a campaign''s lazy queueing holds (5,000).';

-- claim_batch's one call, before it picks: for each active campaign with a
-- backlog, queue its next chunk when none of the newest chunk's lower half
-- is left queued and due (claims take a chunk lowest id first). Half a
-- chunk ahead, so a drain never waits for the next one, and ahead of the
-- pick, so a campaign's priority holds against other mail however long the
-- queue. Without a backlog it is one read of an
-- empty table.
CREATE FUNCTION mailroom._campaign_top_up(p_now timestamptz)
RETURNS integer
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = mailroom, pg_temp
-- Its two reads have one good plan whatever the ids (the queue's primary
-- key, a range): left to choose, PostgreSQL kept planning them afresh on
-- every call once a campaign had a backlog, 0.45 ms a claim against 0.035.
SET plan_cache_mode = force_generic_plan
AS $$
DECLARE
  v_b     record;
  v_taken integer := 0;
BEGIN
  FOR v_b IN
    SELECT b.campaign_id, b.queued_through, b.chunk_first, b.chunk_middle
    FROM mailroom.campaign_backlog b
    JOIN mailroom.campaigns k ON k.id = b.campaign_id
    WHERE k.status = 'active' AND b.not_before <= p_now
    ORDER BY k.priority DESC, b.campaign_id
  LOOP
    -- Still enough: some of the newest chunk's lower half is queued and due.
    -- Read from the middle down: claims take the lowest ids first, so the
    -- first row read is queued until the half is nearly gone.
    PERFORM FROM mailroom.queue q
    WHERE q.id BETWEEN v_b.chunk_first AND v_b.chunk_middle AND q.status = 'queued' AND q.run_at <= p_now
      AND q.campaign_id = v_b.campaign_id
    ORDER BY q.id DESC
    LIMIT 1;
    CONTINUE WHEN FOUND;
    -- Another claimer (or an enqueue_campaign of this campaign) holds it, or
    -- queued the chunk since this read: not this claim's work.
    PERFORM FROM mailroom.campaign_backlog b
    WHERE b.campaign_id = v_b.campaign_id AND b.queued_through = v_b.queued_through
    FOR UPDATE SKIP LOCKED;
    CONTINUE WHEN NOT FOUND;
    v_taken := v_taken + mailroom._campaign_queue_chunk(v_b.campaign_id, mailroom._campaign_chunk_size(), p_now);
  END LOOP;
  RETURN v_taken;
END
$$;
ALTER FUNCTION mailroom._campaign_top_up(timestamptz) OWNER TO mailroom_owner;
REVOKE ALL ON FUNCTION mailroom._campaign_top_up(timestamptz) FROM PUBLIC;
COMMENT ON FUNCTION mailroom._campaign_top_up(timestamptz) IS
  'Internal (claim_batch, once per claim): queue the next chunk of every active campaign whose newest chunk has no due queued mail left in its lower half; backlog rows another session holds are skipped. Returns how many mails it took.';

-- Everything still unqueued, queued now: for the revert (v0.3 keeps every
-- mail in one table) and for tests.
CREATE FUNCTION mailroom._campaign_queue_all(p_campaign bigint, p_now timestamptz)
RETURNS bigint
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = mailroom, pg_temp
AS $$
DECLARE
  v_taken bigint := 0;
  v_chunk integer;
BEGIN
  PERFORM FROM mailroom.campaign_backlog b WHERE b.campaign_id = p_campaign FOR UPDATE;
  LOOP
    v_chunk := mailroom._campaign_queue_chunk(p_campaign, 100000, p_now);
    v_taken := v_taken + v_chunk;
    EXIT WHEN v_chunk < 100000;
  END LOOP;
  RETURN v_taken;
END
$$;
ALTER FUNCTION mailroom._campaign_queue_all(bigint, timestamptz) OWNER TO mailroom_owner;
REVOKE ALL ON FUNCTION mailroom._campaign_queue_all(bigint, timestamptz) FROM PUBLIC;
COMMENT ON FUNCTION mailroom._campaign_queue_all(bigint, timestamptz) IS
  'Internal (revert, tests): queue every mail of the campaign that has no queue row yet, in chunks of 100,000. Returns how many mails it took.';

COMMIT;
