-- Revert mailroom:claim_batch from pg: back to the v0.4.0 gate, whose
-- re-check of a paused campaign or sender takes a plain FOR SHARE (a claim
-- waits behind an uncommitted pause_campaign, resume_campaign or
-- resume_sender), and whose suppression test knows no forgotten addresses.
-- The change redefined _claim_refused and _claim_gate and added
-- _claim_recheck_delay: every
-- other function of it is as in v0.4.0.

BEGIN;

-- What the gate refused among a claim's picks, moved by the verdict it
-- gives now: cancelled (finished, with a ledger row), paused, parked for a
-- paused sender or re-timed to the window's next opening. The picks are
-- still locked by the claim; those it leased (p_token) are left alone, and
-- one whose verdict is claim by now (a suppression lifted since) stays
-- queued for the next claim. Apart from the claim's own statement so that a
-- claim whose mail all passes (nearly every one) sets up none of these moves.
CREATE OR REPLACE FUNCTION mailroom._claim_refused(p_picks bigint[], p_token uuid, p_paused_senders text[], p_now timestamptz)
RETURNS void
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = mailroom, pg_temp
-- Key lookups only, as in _claim_batch.
SET enable_seqscan = off
SET enable_bitmapscan = off
SET enable_hashjoin = off
SET enable_mergejoin = off
SET jit = off
SET plan_cache_mode = force_generic_plan
AS $$
BEGIN
  WITH gated AS (
    SELECT q.id, t.campaign_id, t.schedule_id, t.recipient_zone, q.sender,
           CASE WHEN g.verdict IN ('claim', 'window') AND q.sender = ANY (p_paused_senders) THEN 'sender_paused'
                ELSE g.verdict END AS verdict
    FROM unnest(p_picks) AS c(id)
    JOIN mailroom.queue q ON q.id = ANY (ARRAY[c.id])
    JOIN mailroom.contents t ON t.id = ANY (ARRAY[c.id])
    CROSS JOIN LATERAL mailroom._claim_gate(t.address_key, t.stream, t.campaign_id, t.schedule_id, t.recipient_zone, p_now) AS g
    WHERE q.lease_token IS DISTINCT FROM p_token
  ),
  stopped AS (
    DELETE FROM mailroom.queue q
    USING gated g
    WHERE q.id = ANY (ARRAY[g.id]) AND g.verdict IN ('suppressed', 'campaign_cancelled', 'schedule_inactive')
    RETURNING q.id, q.attempts, q.last_error, g.verdict
  ),
  stopped_ledger AS (
    INSERT INTO mailroom.attempts (message_id, attempt, finished_at, outcome, finished_as, status_reason, last_error)
    SELECT s.id, s.attempts, p_now, 'cancelled', 'cancelled', s.verdict, s.last_error
    FROM stopped s
  ),
  -- Held only if the campaign is still paused once its row is locked (FOR
  -- SHARE re-reads the newest version): a resume committing meanwhile
  -- cannot leave mail paused behind it.
  held AS (
    UPDATE mailroom.queue q
    SET status = 'paused', status_reason = 'campaign_paused', updated_at = greatest(p_now, q.updated_at)
    FROM gated g
    WHERE q.id = ANY (ARRAY[g.id]) AND g.verdict = 'paused'
      AND EXISTS (SELECT FROM mailroom.campaigns k WHERE k.id = g.campaign_id AND k.status = 'paused' FOR SHARE)
  ),
  -- Parked only if the sender is still paused once its row is locked: a
  -- resume_sender committing meanwhile cannot leave mail parked behind it.
  held_for_sender AS (
    UPDATE mailroom.queue q
    SET status = 'paused', status_reason = 'sender_paused', updated_at = greatest(p_now, q.updated_at)
    FROM gated g
    WHERE q.id = ANY (ARRAY[g.id]) AND g.verdict = 'sender_paused'
      AND EXISTS (SELECT FROM mailroom.sender_pauses sp WHERE sp.sender = g.sender FOR SHARE)
  )
  UPDATE mailroom.queue q
  SET run_at = (SELECT mailroom._window_opening(g.recipient_zone, k.time_zone, k.window_start, k.window_end,
                                                sc.time_zone, sc.window_start, sc.window_end, p_now)
                FROM (SELECT) AS one
                LEFT JOIN mailroom.campaigns k ON k.id = g.campaign_id
                LEFT JOIN mailroom.schedules sc ON sc.id = g.schedule_id),
      updated_at = greatest(p_now, q.updated_at)
  FROM gated g
  WHERE q.id = ANY (ARRAY[g.id]) AND g.verdict = 'window';
END
$$;
ALTER FUNCTION mailroom._claim_refused(bigint[], uuid, text[], timestamptz) OWNER TO mailroom_owner;
REVOKE ALL ON FUNCTION mailroom._claim_refused(bigint[], uuid, text[], timestamptz) FROM PUBLIC;
COMMENT ON FUNCTION mailroom._claim_refused(bigint[], uuid, text[], timestamptz) IS
  'Internal (claim_batch): moves the picks of a claim that the gate refuses now (cancelled with a ledger row, paused, parked for a paused sender, re-timed to the send window''s next opening); the ones leased under p_token are left alone.';

DROP FUNCTION mailroom._claim_recheck_delay();

-- The v0.4.0 gate: suppressions only.
CREATE OR REPLACE FUNCTION mailroom._claim_gate(
  p_address_key    text,
  p_stream         text,
  p_campaign_id    bigint,
  p_schedule_id    bigint,
  p_recipient_zone text,
  p_now            timestamptz
)
RETURNS TABLE (verdict text)
LANGUAGE sql
STABLE
AS $$
  SELECT CASE
           WHEN EXISTS (SELECT FROM mailroom.suppressions s
                        WHERE s.address_key = p_address_key AND (s.stream IS NULL OR s.stream = p_stream)) THEN 'suppressed'
           WHEN p_campaign_id IS NULL AND p_schedule_id IS NULL THEN 'claim'
           ELSE (SELECT CASE
                          WHEN k.status = 'cancelled' THEN 'campaign_cancelled'
                          WHEN k.status = 'paused' THEN 'paused'
                          WHEN NOT sc.active THEN 'schedule_inactive'
                          WHEN mailroom._window_opening(p_recipient_zone, k.time_zone, k.window_start, k.window_end,
                                                        sc.time_zone, sc.window_start, sc.window_end, p_now) > p_now
                            THEN 'window'
                          ELSE 'claim'
                        END
                 FROM (SELECT) AS one
                 LEFT JOIN mailroom.campaigns k ON k.id = p_campaign_id
                 LEFT JOIN mailroom.schedules sc ON sc.id = p_schedule_id)
         END
$$;
ALTER FUNCTION mailroom._claim_gate(text, text, bigint, bigint, text, timestamptz) OWNER TO mailroom_owner;
REVOKE ALL ON FUNCTION mailroom._claim_gate(text, text, bigint, bigint, text, timestamptz) FROM PUBLIC;
COMMENT ON FUNCTION mailroom._claim_gate(text, text, bigint, bigint, text, timestamptz) IS
  'Internal (inlined into claim_batch): claim, suppressed (for all streams or for p_stream), campaign_cancelled, paused, schedule_inactive or window for a mail to the address whose suppression key is p_address_key (contents.address_key), of that stream, campaign or schedule, at p_now.';

COMMIT;
