-- Deploy mailroom:campaign_control to pg
-- requires: campaign_control@v0.4.0

-- v0.4: a campaign's mail is found through contents' campaign index
-- (contents_campaign_idx) and its live rows in mailroom.queue by id. What a pause
-- or a cancel guarantees no longer depends on this file: claim_batch's gate
-- reads the campaign's status for every mail it is about to hand out (a
-- paused campaign's mail is parked as paused, a cancelled one's finished as
-- cancelled), so mail that came back to 'queued' after these functions ran
-- (a runner's retry, a reclaim, a release, an operator's retry: issue 13,
-- hole 2) cannot leave either. What pause and cancel do here is move the
-- campaign's live mail at once, so the gate meets little of it and
-- campaign_progress tells the truth immediately.
--
-- Semantics (docs/scheduling.md): once pause_campaign (or cancel_campaign)
-- has committed, no claim that starts afterwards returns the campaign's mail;
-- mail a runner already holds (sending) may still be sent.
--
-- Public functions take no p_now (issue 13, hole 4): the database's clock.

BEGIN;

CREATE OR REPLACE FUNCTION mailroom._campaign_lock(p_campaign bigint)
RETURNS text
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = mailroom, pg_temp
AS $$
DECLARE
  v_status text;
BEGIN
  SELECT status INTO v_status FROM mailroom.campaigns WHERE id = p_campaign FOR UPDATE;
  IF NOT FOUND THEN
    RAISE EXCEPTION 'mailroom: campaign: no campaign with id %', coalesce(p_campaign::text, 'NULL')
      USING ERRCODE = '22023';
  END IF;
  RETURN v_status;
END
$$;
ALTER FUNCTION mailroom._campaign_lock(bigint) OWNER TO mailroom_owner;
REVOKE ALL ON FUNCTION mailroom._campaign_lock(bigint) FROM PUBLIC;
COMMENT ON FUNCTION mailroom._campaign_lock(bigint) IS
  'Internal: lock a campaign row and return its status; raises 22023 when there is no such campaign.';

CREATE OR REPLACE FUNCTION mailroom.pause_campaign(p_campaign bigint)
RETURNS integer
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = mailroom, pg_temp
AS $$
DECLARE
  v_status text := mailroom._campaign_lock(p_campaign);
  v_count  integer;
BEGIN
  IF v_status = 'paused' THEN
    RETURN 0;
  ELSIF v_status <> 'active' THEN
    RAISE EXCEPTION 'mailroom: campaign: % is %, only an active campaign can be paused', p_campaign, v_status
      USING ERRCODE = '55000';
  END IF;
  -- The campaign's status is what the gate reads: from this commit on, no
  -- claim that starts hands its mail out.
  UPDATE mailroom.campaigns SET status = 'paused', updated_at = now() WHERE id = p_campaign;
  -- An optimisation: park its queued mail now, so claims skip it by index.
  -- Rows a runner is claiming right now are locked: this waits for that
  -- claim and then skips them (they are 'sending'). The queue rows carry
  -- their campaign: a read of the hot queue (O(live mail)), not of the
  -- campaign's contents through contents_campaign_idx, which is O(all of
  -- its mail, finished too: 104 ms for 5,000 live of 205,000; 25 ms so;
  -- bench/operator_reads.py). No index on queue.campaign_id: every claim
  -- would write it.
  UPDATE mailroom.queue q SET status = 'paused', status_reason = 'campaign_paused', updated_at = now()
  WHERE q.campaign_id = p_campaign AND q.status = 'queued';
  GET DIAGNOSTICS v_count = ROW_COUNT;
  RETURN v_count;
END
$$;
ALTER FUNCTION mailroom.pause_campaign(bigint) OWNER TO mailroom_owner;
REVOKE ALL ON FUNCTION mailroom.pause_campaign(bigint) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION mailroom.pause_campaign(bigint) TO mailroom_app, mailroom_operator;
COMMENT ON FUNCTION mailroom.pause_campaign(bigint) IS
  'Hold a campaign: no claim that starts after this commits returns its mail (its queued mail becomes paused now; mail coming back later is parked by claim_batch); mail being sent finishes. Returns how many were held now; pausing a paused campaign does nothing.';

CREATE OR REPLACE FUNCTION mailroom.resume_campaign(p_campaign bigint)
RETURNS integer
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = mailroom, pg_temp
AS $$
DECLARE
  v_status text := mailroom._campaign_lock(p_campaign);
  v_c      mailroom.campaigns%ROWTYPE;
  v_count  integer;
BEGIN
  IF v_status = 'active' THEN
    RETURN 0;
  ELSIF v_status <> 'paused' THEN
    RAISE EXCEPTION 'mailroom: campaign: % is %, only a paused campaign can be resumed', p_campaign, v_status
      USING ERRCODE = '55000';
  END IF;
  SELECT * INTO v_c FROM mailroom.campaigns WHERE id = p_campaign;
  UPDATE mailroom.campaigns SET status = 'active', updated_at = now() WHERE id = p_campaign;
  -- Paused by the circuit breaker or not: the campaign starts a fresh window.
  PERFORM mailroom._breaker_reset('campaign', p_campaign::text, now());
  -- Each mail goes back once (same row, same delivery key): nobody twice.
  -- The send window is re-applied here to spare the gate the work; the gate
  -- applies it again at claim time either way. The paused rows are found in
  -- the hot queue by their campaign (as in pause_campaign), and a row's
  -- contents are read (by primary key) only for a send window's zone.
  UPDATE mailroom.queue q
  SET status = 'queued',
      status_reason = NULL,
      run_at = CASE WHEN v_c.window_start IS NULL THEN q.run_at
                    ELSE mailroom._window_open(coalesce((SELECT c.recipient_zone FROM mailroom.contents c
                                                         WHERE c.id = q.id), v_c.time_zone),
                                               v_c.window_start, v_c.window_end, greatest(q.run_at, now())) END,
      updated_at = now()
  WHERE q.campaign_id = p_campaign AND q.status = 'paused';
  GET DIAGNOSTICS v_count = ROW_COUNT;
  IF v_count > 0 THEN
    PERFORM pg_notify('mailroom', v_c.sender);
  END IF;
  RETURN v_count;
END
$$;
ALTER FUNCTION mailroom.resume_campaign(bigint) OWNER TO mailroom_owner;
REVOKE ALL ON FUNCTION mailroom.resume_campaign(bigint) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION mailroom.resume_campaign(bigint) TO mailroom_app, mailroom_operator;
COMMENT ON FUNCTION mailroom.resume_campaign(bigint) IS
  'Release a paused campaign (paused by hand or by the circuit breaker, whose counts for it start afresh): its paused mail is queued again (send window re-applied). Returns how many; resuming an active campaign does nothing.';

CREATE OR REPLACE FUNCTION mailroom.cancel_campaign(p_campaign bigint)
RETURNS integer
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = mailroom, pg_temp
AS $$
DECLARE
  v_status   text := mailroom._campaign_lock(p_campaign);
  v_count    integer;
  v_unqueued integer;
BEGIN
  IF v_status = 'cancelled' THEN
    RETURN 0;
  ELSIF v_status = 'done' THEN
    RAISE EXCEPTION 'mailroom: campaign: % is done, nothing is left to cancel', p_campaign
      USING ERRCODE = '55000';
  END IF;
  UPDATE mailroom.campaigns SET status = 'cancelled', finished_at = now(), updated_at = now() WHERE id = p_campaign;
  -- Its mail not queued yet (deploy/campaign_chunks.sql) is finished now
  -- too, one cancelled ledger row each: a cancelled campaign leaves no mail
  -- without a state. Its backlog row is taken first, waiting for a claim
  -- that is queueing a chunk of it right now (that chunk is then in the
  -- queue and is finished below).
  PERFORM FROM mailroom.campaign_backlog b WHERE b.campaign_id = p_campaign FOR UPDATE;
  INSERT INTO mailroom.attempts (message_id, attempt, finished_at, outcome, finished_as, status_reason)
  SELECT c.id, 0, now(), 'cancelled', 'cancelled', 'campaign_cancelled'
  FROM mailroom.campaign_backlog b
  JOIN mailroom.contents c ON c.campaign_id = b.campaign_id AND c.id > b.queued_through
  WHERE b.campaign_id = p_campaign
    AND NOT EXISTS (SELECT FROM mailroom.attempts f WHERE f.message_id = c.id AND f.finished_as IS NOT NULL);
  GET DIAGNOSTICS v_unqueued = ROW_COUNT;
  DELETE FROM mailroom.campaign_backlog WHERE campaign_id = p_campaign;
  -- Finish its queued and paused mail now (queue row out, one finishing
  -- ledger row each); what a runner holds finishes its attempt, and
  -- whatever comes back later is finished by claim_batch's gate.
  WITH gone AS (
    DELETE FROM mailroom.queue q
    USING mailroom.contents c
    WHERE c.campaign_id = p_campaign AND q.id = c.id AND q.status IN ('queued', 'paused')
    RETURNING q.id, q.attempts, q.last_error
  )
  INSERT INTO mailroom.attempts (message_id, attempt, finished_at, outcome, finished_as, status_reason, last_error)
  SELECT g.id, g.attempts, now(), 'cancelled', 'cancelled', 'campaign_cancelled', g.last_error
  FROM gone g;
  GET DIAGNOSTICS v_count = ROW_COUNT;
  RETURN v_count + v_unqueued;
END
$$;
ALTER FUNCTION mailroom.cancel_campaign(bigint) OWNER TO mailroom_owner;
REVOKE ALL ON FUNCTION mailroom.cancel_campaign(bigint) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION mailroom.cancel_campaign(bigint) TO mailroom_app, mailroom_operator;
COMMENT ON FUNCTION mailroom.cancel_campaign(bigint) IS
  'Cancel a campaign: its queued and paused mail, and its mail not queued yet, is finished as cancelled (reason campaign_cancelled), and no claim that starts after this commits returns any of its mail; mail being sent finishes. Returns how many were cancelled now.';

-- v0.4.1 (issue 32, item 2): one UPDATE judged the campaign row and its
-- backlog and live mail together, and a re-run of enqueue_campaign adding
-- recipients to an active campaign whose queued mail had all left holds the
-- campaign row FOR SHARE: the UPDATE waited for it, then re-checked only the
-- campaign row while its NOT EXISTS over campaign_backlog and the queue
-- still read the snapshot from before the re-run committed. The campaign
-- was marked done with a backlog row present and its new mail never queued.
-- Now the candidates are locked first, and what decides is read by a later
-- statement, whose snapshot is taken once the locks are held: whoever
-- added mail or a backlog under the campaign's row (enqueue_campaign,
-- retry, resolve_review all take it FOR SHARE) has committed by then and
-- is seen, and whoever comes later waits for this transaction and finds
-- the campaign done (enqueue_campaign makes a done campaign active again
-- when it adds mail). Chunks queued by claims need no lock here: a chunk
-- moves mail from the backlog to the queue in one transaction, so every
-- snapshot sees one or the other. A campaign some transaction holds is
-- skipped, not waited for (SKIP LOCKED): the next run (pg_cron, every
-- minute) finishes it, and this never waits behind an application.
CREATE OR REPLACE FUNCTION mailroom.finish_campaigns()
RETURNS integer
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = mailroom, pg_temp
AS $$
DECLARE
  v_candidates bigint[];
  v_count      integer;
BEGIN
  -- Done = no live mail left that may still be sent (review mail waits for
  -- an operator and does not keep a campaign open, as in v0.3), and none
  -- not queued yet (a backlog row). Live mail is found by the queue's own
  -- campaign_id (kept equal to contents', integrity_problems checks it):
  -- the hot queue holds live mail only, so this reads no history.
  -- 1. Lock the campaigns that look done (the look only narrows the
  --    candidates: step 2 decides).
  SELECT coalesce(array_agg(k.id), '{}') INTO v_candidates
  FROM (SELECT k.id FROM mailroom.campaigns k
        WHERE k.status = 'active'
          AND NOT EXISTS (SELECT FROM mailroom.campaign_backlog b WHERE b.campaign_id = k.id)
          AND NOT EXISTS (SELECT FROM mailroom.queue q
                          WHERE q.campaign_id = k.id AND q.status IN ('queued', 'sending', 'paused'))
        FOR UPDATE SKIP LOCKED) AS k;
  IF cardinality(v_candidates) = 0 THEN
    RETURN 0;
  END IF;
  -- 2. A new statement, so a new snapshot, taken with the rows held.
  UPDATE mailroom.campaigns k
  SET status = 'done', finished_at = now(), updated_at = now()
  WHERE k.id = ANY (v_candidates)
    AND k.status = 'active'
    AND NOT EXISTS (SELECT FROM mailroom.campaign_backlog b WHERE b.campaign_id = k.id)
    AND NOT EXISTS (SELECT FROM mailroom.queue q
                    WHERE q.campaign_id = k.id AND q.status IN ('queued', 'sending', 'paused'));
  GET DIAGNOSTICS v_count = ROW_COUNT;
  RETURN v_count;
END
$$;
ALTER FUNCTION mailroom.finish_campaigns() OWNER TO mailroom_owner;
REVOKE ALL ON FUNCTION mailroom.finish_campaigns() FROM PUBLIC;
GRANT EXECUTE ON FUNCTION mailroom.finish_campaigns() TO mailroom_operator;
COMMENT ON FUNCTION mailroom.finish_campaigns() IS
  'Housekeeping (pg_cron job mailroom-materialize): mark active campaigns with nothing queued, sending, paused or not queued yet as done. Returns how many.';

-- The ETA and its note, from a campaign's counts; campaign_progress and
-- console_reads' campaign_summaries count differently (all of a campaign's
-- mail, or the hot queue and an index-only total) and both show this.
-- Mail a send window holds (claim_batch re-times it to the window's next
-- opening), mail due later by send_at and retries in backoff cannot go
-- before its run_at: the ETA is the later of sending what is due now and
-- sending what waits once the last of it is due, both at the last minute's
-- rate (v0.4 divided everything queued by the rate and said 3 minutes for
-- mail held until 07:00). It reads no table; whoever reads the view must be
-- able to execute it (a view's functions run with its reader's rights), so
-- it is a definer function like every other one a group role may call.
CREATE OR REPLACE FUNCTION mailroom._campaign_eta(
  p_status           text,
  p_queued           bigint,
  p_sending          bigint,
  p_due              bigint,
  p_waiting          bigint,
  p_sent_last_minute bigint,
  p_next_due_at      timestamptz,
  p_last_due_at      timestamptz,
  OUT eta            interval,
  OUT eta_note       text
)
LANGUAGE sql STABLE
SECURITY DEFINER
SET search_path = mailroom, pg_temp
AS $$
  SELECT CASE WHEN p_sent_last_minute > 0 AND p_status = 'active'
              THEN greatest((p_due + p_sending) * interval '60 seconds' / p_sent_last_minute,
                            (p_last_due_at - now()) + p_waiting * interval '60 seconds' / p_sent_last_minute) END,
         CASE WHEN p_status <> 'active' THEN format('no ETA: the campaign is %s', p_status)
              WHEN p_queued + p_sending = 0 THEN NULL
              WHEN p_sent_last_minute = 0 AND p_due + p_sending = 0
                THEN format('no ETA: nothing is due before %s (a send window, send_at or retry backoff), and no rate to go by',
                            p_next_due_at)
              WHEN p_sent_last_minute = 0 THEN 'no ETA: nothing was sent in the last minute, so there is no rate to go by'
              WHEN p_waiting > 0
                THEN format('%s mail(s) wait until %s at the latest (send windows, send_at, retry backoff): counted from then at the current rate',
                            p_waiting, p_last_due_at)
         END
$$;
ALTER FUNCTION mailroom._campaign_eta(text, bigint, bigint, bigint, bigint, bigint, timestamptz, timestamptz) OWNER TO mailroom_owner;
REVOKE ALL ON FUNCTION mailroom._campaign_eta(text, bigint, bigint, bigint, bigint, bigint, timestamptz, timestamptz) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION mailroom._campaign_eta(text, bigint, bigint, bigint, bigint, bigint, timestamptz, timestamptz)
  TO mailroom_operator, mailroom_app;
COMMENT ON FUNCTION mailroom._campaign_eta(text, bigint, bigint, bigint, bigint, bigint, timestamptz, timestamptz) IS
  'Internal (campaign_progress, campaign_summaries): a campaign''s ETA at the last minute''s rate, waiting for mail not yet due until the last of it is, and eta_note saying why the ETA is NULL or what it assumed. Reads no table.';

-- Per campaign, from the tables (not the messages view): its contents rows
-- by contents_campaign_idx, each one's live queue row by
-- primary key, or else its finishing ledger row by the ledger's (message_id, 0).
-- A mail with neither is not queued yet (deploy/campaign_chunks.sql): it
-- counts as queued (as paused while the campaign is paused), due once the
-- campaign's send_at has passed.
CREATE OR REPLACE VIEW mailroom.campaign_progress AS
SELECT k.id AS campaign_id,
       k.name,
       CASE WHEN k.status = 'active' AND s.queued + s.sending + s.paused = 0 THEN 'done' ELSE k.status END AS status,
       k.priority,
       k.send_at,
       s.total, s.queued, s.paused, s.sending, s.sent, s.failed, s.cancelled, s.review,
       s.sent_last_minute,
       round(s.sent_last_minute / 60.0, 2) AS send_rate_per_second,
       now() - s.oldest_due AS oldest_queued_age,
       e.eta,
       k.created_at,
       k.finished_at,
       s.due,
       s.waiting,
       s.next_due_at,
       e.eta_note
FROM mailroom.campaigns k
CROSS JOIN LATERAL (
  SELECT count(*) AS total,
         count(*) FILTER (WHERE q.status = 'queued' OR (q.id IS NULL AND f.id IS NULL AND k.status <> 'paused')) AS queued,
         count(*) FILTER (WHERE q.status = 'paused' OR (q.id IS NULL AND f.id IS NULL AND k.status = 'paused')) AS paused,
         count(*) FILTER (WHERE q.status = 'sending') AS sending,
         count(*) FILTER (WHERE q.id IS NULL AND f.finished_as = 'sent') AS sent,
         count(*) FILTER (WHERE q.id IS NULL AND f.finished_as = 'failed') AS failed,
         count(*) FILTER (WHERE q.id IS NULL AND f.finished_as = 'cancelled') AS cancelled,
         count(*) FILTER (WHERE q.status = 'review') AS review,
         count(*) FILTER (WHERE q.id IS NULL AND f.finished_as = 'sent'
                            AND f.finished_at > now() - interval '1 minute') AS sent_last_minute,
         min(q.run_at) FILTER (WHERE q.status = 'queued' AND q.run_at <= now()) AS oldest_due,
         count(*) FILTER (WHERE (q.status = 'queued' AND q.run_at <= now())
                            OR (q.id IS NULL AND f.id IS NULL AND k.status = 'active' AND k.send_at <= now())) AS due,
         count(*) FILTER (WHERE (q.status = 'queued' AND q.run_at > now())
                            OR (q.id IS NULL AND f.id IS NULL AND k.status = 'active' AND k.send_at > now())) AS waiting,
         min(w.run_at) AS next_due_at,
         max(w.run_at) AS last_due_at
  FROM mailroom.contents c
  LEFT JOIN mailroom.queue q ON q.id = c.id
  LEFT JOIN mailroom.attempts f ON f.message_id = c.id AND f.finished_as IS NOT NULL
  -- when a mail waiting for later will be due: its run_at, or for mail not
  -- queued yet the campaign's send_at
  CROSS JOIN LATERAL (SELECT CASE WHEN q.status = 'queued' AND q.run_at > now() THEN q.run_at
                                  WHEN q.id IS NULL AND f.id IS NULL AND k.status = 'active' AND k.send_at > now()
                                  THEN k.send_at END AS run_at) w
  WHERE c.campaign_id = k.id
) s
CROSS JOIN LATERAL mailroom._campaign_eta(k.status, s.queued, s.sending, s.due, s.waiting, s.sent_last_minute,
                                          s.next_due_at, s.last_due_at) e;
ALTER VIEW mailroom.campaign_progress OWNER TO mailroom_owner;
REVOKE ALL ON mailroom.campaign_progress FROM PUBLIC;
GRANT SELECT ON mailroom.campaign_progress TO mailroom_operator, mailroom_app;
COMMENT ON VIEW mailroom.campaign_progress IS
  'Per campaign: counts per status (live ones from the queue, finished ones from the finishing ledger row), mail sent in the last minute and the rate per second, age of the oldest due queued mail, ETA at the current rate that waits for mail not yet due (send windows, send_at, backoff: due and waiting count them, next_due_at is the first such run_at), eta_note saying why the ETA is NULL or what it assumed; status done as soon as nothing is left to send.';

COMMIT;
