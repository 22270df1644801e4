-- Deploy mailroom:cancel to pg
-- requires: cancel@v0.3.0
-- requires: split_messages
-- requires: retry
-- requires: table_campaign_backlog

-- v0.4: cancelling finishes the mail. Queued, paused or review mail loses its
-- queue row and gains one ledger row (outcome cancelled, finished_as
-- cancelled, status_reason = the operator's reason) in the same statement.
-- Failed mail is finished already: its finishing row becomes a plain attempt
-- row and the cancel is recorded as the new finishing row, so the ledger
-- keeps both the failed attempt and the decision. Mail being sent (sending)
-- cannot be called back and is reported unchanged. No p_now.

BEGIN;

DROP FUNCTION mailroom.cancel(bigint[], text, timestamptz);

CREATE FUNCTION mailroom.cancel(
  p_ids    bigint[],
  p_reason text DEFAULT 'cancelled by operator'
)
RETURNS TABLE (id bigint, previous_status text, status text)
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = mailroom, pg_temp
AS $$
#variable_conflict use_column
DECLARE
  v_ids    bigint[];
  v_before text[];
  v_done   bigint[];
  v_failed bigint[];
  v_attempt integer[];
  v_error  text[];
BEGIN
  PERFORM mailroom._check_ids(p_ids);
  IF p_reason IS NULL OR p_reason = '' OR length(p_reason) > 200 THEN
    RAISE EXCEPTION 'mailroom: reason: must be 1 to 200 characters' USING ERRCODE = '22023';
  END IF;

  -- Campaign mail may not be queued yet (deploy/campaign_chunks.sql): hold
  -- its campaigns' backlog rows, in key order, so no chunk queues it while
  -- it is finished here (a chunk queued meanwhile is waited for and seen).
  PERFORM FROM mailroom.campaign_backlog b
  WHERE b.campaign_id IN (SELECT c.campaign_id FROM mailroom.contents c WHERE c.id = ANY (p_ids))
  ORDER BY b.campaign_id
  FOR UPDATE;

  -- A mail with neither a queue row nor a finishing row is campaign mail
  -- not queued yet: queued, as the messages view says.
  SELECT array_agg(r.id ORDER BY r.id),
         array_agg(CASE WHEN c.id IS NOT NULL THEN coalesce(q.status, f.finished_as, 'queued') END ORDER BY r.id)
  INTO v_ids, v_before
  FROM (SELECT DISTINCT u.id FROM unnest(p_ids) AS u(id)) r
  LEFT JOIN mailroom.contents c ON c.id = r.id
  LEFT JOIN mailroom.queue q ON q.id = r.id
  LEFT JOIN mailroom.attempts f ON f.message_id = r.id AND f.finished_as IS NOT NULL;

  -- Live mail not in a runner's hands: finish it. Rows a claim holds locked
  -- are waited for and then skipped (they are sending).
  WITH gone AS (
    DELETE FROM mailroom.queue q
    WHERE q.id = ANY (v_ids) AND q.status IN ('queued', 'paused', 'review')
    RETURNING q.id, q.attempts, q.last_error
  ),
  finished AS (
    INSERT INTO mailroom.attempts (message_id, attempt, finished_at, outcome, finished_as, status_reason, last_error)
    SELECT g.id, g.attempts, now(), 'cancelled', 'cancelled', p_reason, g.last_error
    FROM gone g
    RETURNING message_id
  )
  SELECT array_agg(message_id) INTO v_done FROM finished;

  -- Campaign mail not queued yet: finished before it ever is (its chunk
  -- skips finished mail).
  WITH finished AS (
    INSERT INTO mailroom.attempts (message_id, attempt, finished_at, outcome, finished_as, status_reason)
    SELECT c.id, 0, now(), 'cancelled', 'cancelled', p_reason
    FROM mailroom.contents c
    JOIN mailroom.campaign_backlog b ON b.campaign_id = c.campaign_id AND c.id > b.queued_through
    WHERE c.id = ANY (v_ids)
      AND NOT EXISTS (SELECT FROM mailroom.queue q WHERE q.id = c.id)
      AND NOT EXISTS (SELECT FROM mailroom.attempts f WHERE f.message_id = c.id AND f.finished_as IS NOT NULL)
    RETURNING message_id
  ),
  -- ... and off its campaign's count of mail not queued yet (the backlog
  -- rows are held above), which queue_stats and campaign_summaries read.
  counted AS (
    UPDATE mailroom.campaign_backlog b SET unqueued = greatest(b.unqueued - n.cancelled, 0), updated_at = now()
    FROM (SELECT c.campaign_id, count(*) AS cancelled
          FROM finished f JOIN mailroom.contents c ON c.id = f.message_id
          GROUP BY c.campaign_id) n
    WHERE b.campaign_id = n.campaign_id
  )
  SELECT coalesce(v_done, '{}') || coalesce(array_agg(message_id), '{}') INTO v_done FROM finished;

  -- Failed mail: the failed row stops being the finishing row (one
  -- statement) before the cancel's row becomes it (the next): at most one
  -- finishing row per mail (the ledger's primary key).
  WITH unfinished AS (
    UPDATE mailroom.attempts f SET finished_as = NULL, finish_key = f.id
    WHERE f.message_id = ANY (v_ids) AND f.finished_as = 'failed'
    RETURNING f.message_id, f.attempt, f.last_error
  )
  SELECT array_agg(u.message_id), array_agg(u.attempt), array_agg(u.last_error)
  INTO v_failed, v_attempt, v_error
  FROM unfinished u;
  INSERT INTO mailroom.attempts (message_id, attempt, finished_at, outcome, finished_as, status_reason, last_error)
  SELECT u.id, u.attempt, now(), 'cancelled', 'cancelled', p_reason, u.last_error
  FROM unnest(v_failed, v_attempt, v_error) AS u(id, attempt, last_error);
  v_done := coalesce(v_done, '{}') || coalesce(v_failed, '{}');

  RETURN QUERY
  SELECT u.id, u.before, CASE WHEN u.id = ANY (v_done) THEN 'cancelled' ELSE u.before END
  FROM unnest(v_ids, v_before) AS u(id, before)
  ORDER BY u.id;
END
$$;
ALTER FUNCTION mailroom.cancel(bigint[], text) OWNER TO mailroom_owner;
REVOKE ALL ON FUNCTION mailroom.cancel(bigint[], text) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION mailroom.cancel(bigint[], text) TO mailroom_operator;
COMMENT ON FUNCTION mailroom.cancel(bigint[], text) IS
  'Operator: cancel queued (campaign mail not queued yet included), paused, review or failed mail (finished as cancelled, status_reason = p_reason). One row per requested id: previous_status NULL = no such message; status unchanged = not cancellable (sending, sent, already cancelled).';

COMMIT;
