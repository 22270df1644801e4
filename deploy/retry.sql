-- Deploy mailroom:retry to pg
-- requires: retry@v0.3.0
-- requires: split_messages

-- v0.4: review mail is a queue row (status review); failed mail is finished
-- (no queue row, a finishing ledger row with finished_as = failed). An
-- operator's retry puts either back in the queue: a review row is queued
-- again in place; a failed mail's finishing row stops being one
-- (finished_as = NULL: it stays in the ledger as the attempt it was) and a
-- queue row is written for it, in the same statement, so the mail is live
-- again with exactly one of the two (contract invariant 1).
--
-- Whether the retried mail may leave is claim_batch's decision (its gate
-- reads suppressions, the campaign and the schedule for every mail it hands
-- out). What retry decides here only spares the gate work and tells the
-- operator what happened: mail to a suppressed address, of a cancelled
-- campaign or of an inactive schedule is not retried (status unchanged),
-- mail of a paused campaign is put back as paused. To make that last
-- decision agree with pause/resume, the campaigns concerned are locked
-- FOR SHARE first: a concurrent pause or resume waits for this commit and
-- then moves these rows too (without the lock a resume could miss a row
-- written paused here, and it would stay paused).
--
-- No p_now (issue 13, hole 4): the database's clock.

BEGIN;

DROP FUNCTION mailroom.retry(bigint[], timestamptz);
DROP FUNCTION mailroom.retry_campaign(bigint, timestamptz);

-- unchanged since v0.1.0; here so that this file defines the whole change
CREATE OR REPLACE FUNCTION mailroom._check_ids(p_ids bigint[])
RETURNS void
LANGUAGE plpgsql IMMUTABLE
SET search_path = mailroom, pg_temp
AS $$
BEGIN
  IF p_ids IS NULL OR cardinality(p_ids) = 0 THEN
    RAISE EXCEPTION 'mailroom: ids: at least one message id is required' USING ERRCODE = '22023';
  END IF;
  IF array_position(p_ids, NULL) IS NOT NULL THEN
    RAISE EXCEPTION 'mailroom: ids: must not contain NULL' USING ERRCODE = '22023';
  END IF;
  IF cardinality(p_ids) > 10000 THEN
    RAISE EXCEPTION 'mailroom: ids: at most 10000 ids per call, got %', cardinality(p_ids) USING ERRCODE = '22023';
  END IF;
END
$$;
ALTER FUNCTION mailroom._check_ids(bigint[]) OWNER TO mailroom_owner;
REVOKE ALL ON FUNCTION mailroom._check_ids(bigint[]) FROM PUBLIC;
COMMENT ON FUNCTION mailroom._check_ids(bigint[]) IS
  'Internal: raise 22023 unless the array holds 1 to 10000 message ids and no NULL.';

CREATE FUNCTION mailroom._retry(p_ids bigint[])
RETURNS TABLE (id bigint, previous_status text, status text, not_retried_because text)
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = mailroom, pg_temp
AS $$
#variable_conflict use_column
DECLARE
  v_ids     bigint[];
  v_before  text[];
  v_after   text[];
  v_why     text[];
  v_senders text[];
  v_sender  text;
BEGIN
  PERFORM FROM mailroom.campaigns k
  WHERE k.id IN (SELECT c.campaign_id FROM mailroom.contents c WHERE c.id = ANY (p_ids) AND c.campaign_id IS NOT NULL)
  ORDER BY k.id
  FOR SHARE;

  WITH requested AS (
    SELECT DISTINCT r.id FROM unnest(p_ids) AS r(id)
  ),
  before AS (
    -- why each mail would not be retried, in the order an operator fixes
    -- them (eligible below decides; this only explains "retried 0 of 1")
    SELECT r.id, CASE WHEN c.id IS NOT NULL THEN coalesce(q.status, f.finished_as) END AS status,
           CASE WHEN c.id IS NULL THEN 'no such message'
                WHEN coalesce(q.status, f.finished_as) NOT IN ('failed', 'review')
                  THEN format('it is %s: only failed or review mail is retried', coalesce(q.status, f.finished_as))
                WHEN k.status = 'cancelled' THEN format('its campaign %s is cancelled', k.id)
                WHEN s.active = false THEN format('its schedule %s is inactive', s.id)
                ELSE (SELECT format('the address is suppressed (%s since %s); mailroom.unsuppress(%L) lifts it',
                                    x.reason, x.created_at::date, c.to_address)
                      FROM mailroom.suppressions x WHERE x.address_key = mailroom._address_key(c.to_address)
                      LIMIT 1)
           END AS refusal
    FROM requested r
    LEFT JOIN mailroom.contents c ON c.id = r.id
    LEFT JOIN mailroom.queue q ON q.id = r.id
    LEFT JOIN mailroom.attempts f ON f.message_id = r.id AND f.finished_as IS NOT NULL
    LEFT JOIN mailroom.campaigns k ON k.id = c.campaign_id
    LEFT JOIN mailroom.schedules s ON s.id = c.schedule_id
  ),
  eligible AS (
    SELECT c.id, c.priority, c.sender, c.campaign_id, c.max_attempts, c.on_ambiguous,
           CASE WHEN k.status = 'paused' THEN 'paused' ELSE 'queued' END AS new_status
    FROM requested r
    JOIN mailroom.contents c ON c.id = r.id
    LEFT JOIN mailroom.campaigns k ON k.id = c.campaign_id
    LEFT JOIN mailroom.schedules s ON s.id = c.schedule_id
    WHERE k.status IS DISTINCT FROM 'cancelled'
      AND s.active IS DISTINCT FROM false
      AND NOT EXISTS (SELECT FROM mailroom.suppressions x WHERE x.address_key = mailroom._address_key(c.to_address)
                                                          AND (x.stream IS NULL OR x.stream = c.stream))
  ),
  requeued AS (
    -- in review: back to the queue in place, due now, a fresh attempt budget
    UPDATE mailroom.queue q
    SET status = e.new_status, status_reason = 'operator retry', attempts = 0, run_at = now(), updated_at = now()
    FROM eligible e
    WHERE q.id = e.id AND q.status = 'review'
    RETURNING q.id, q.status, q.sender
  ),
  unfinished AS (
    -- failed: its finishing row becomes a plain attempt row again ...
    UPDATE mailroom.attempts f
    SET finished_as = NULL, finish_key = f.id
    FROM eligible e
    WHERE f.message_id = e.id AND f.finished_as = 'failed'
    RETURNING f.message_id, f.last_error
  ),
  revived AS (
    -- ... and the mail gets a live row, due now
    INSERT INTO mailroom.queue (id, status, status_reason, priority, run_at, sender, campaign_id, attempts,
                                max_attempts, on_ambiguous, last_error, updated_at)
    SELECT e.id, e.new_status, 'operator retry', e.priority, now(), e.sender, e.campaign_id, 0, e.max_attempts,
           e.on_ambiguous, u.last_error, now()
    FROM unfinished u JOIN eligible e ON e.id = u.message_id
    RETURNING id, status, sender
  ),
  moved AS (
    SELECT * FROM requeued UNION ALL SELECT * FROM revived
  )
  SELECT array_agg(b.id ORDER BY b.id),
         array_agg(b.status ORDER BY b.id),
         array_agg(coalesce(mv.status, b.status) ORDER BY b.id),
         array_agg(CASE WHEN mv.id IS NULL THEN coalesce(b.refusal, 'not retryable') END ORDER BY b.id),
         array_agg(DISTINCT mv.sender) FILTER (WHERE mv.status = 'queued')
  INTO v_ids, v_before, v_after, v_why, v_senders
  FROM before b LEFT JOIN moved mv ON mv.id = b.id;

  -- Wake idle runners of each sender concerned (delivered at commit).
  FOREACH v_sender IN ARRAY coalesce(v_senders, '{}') LOOP
    PERFORM pg_notify('mailroom', v_sender);
  END LOOP;
  RETURN QUERY SELECT * FROM unnest(v_ids, v_before, v_after, v_why);
END
$$;
ALTER FUNCTION mailroom._retry(bigint[]) OWNER TO mailroom_owner;
REVOKE ALL ON FUNCTION mailroom._retry(bigint[]) FROM PUBLIC;
COMMENT ON FUNCTION mailroom._retry(bigint[]) IS
  'Internal: the work of retry and retry_campaign (no limit on the number of ids).';

CREATE FUNCTION mailroom.retry(p_ids bigint[])
RETURNS TABLE (id bigint, previous_status text, status text, not_retried_because text)
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = mailroom, pg_temp
AS $$
BEGIN
  PERFORM mailroom._check_ids(p_ids);
  RETURN QUERY SELECT * FROM mailroom._retry(p_ids);
END
$$;
ALTER FUNCTION mailroom.retry(bigint[]) OWNER TO mailroom_owner;
REVOKE ALL ON FUNCTION mailroom.retry(bigint[]) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION mailroom.retry(bigint[]) TO mailroom_operator;
COMMENT ON FUNCTION mailroom.retry(bigint[]) IS
  'Operator: put failed or review mail back in the queue, due now, attempts reset to 0 (mail of a paused campaign is held as paused). One row per requested id: previous_status NULL = no such message; status unchanged = not retryable, and not_retried_because says why (no such message, another status, the address is suppressed, its campaign is cancelled or its schedule inactive; NULL when retried). Retrying review mail accepts that the recipient may get it twice.';

CREATE FUNCTION mailroom.retry_campaign(p_campaign_id bigint)
RETURNS integer
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = mailroom, pg_temp
AS $$
DECLARE
  v_ids bigint[];
BEGIN
  IF p_campaign_id IS NULL OR p_campaign_id < 1 THEN
    RAISE EXCEPTION 'mailroom: campaign_id: must be a positive campaign id, got %', coalesce(p_campaign_id::text, 'NULL')
      USING ERRCODE = '22023';
  END IF;
  -- The campaign's failed and review mail, by contents' campaign index.
  SELECT array_agg(c.id) INTO v_ids
  FROM mailroom.contents c
  LEFT JOIN mailroom.queue q ON q.id = c.id
  WHERE c.campaign_id = p_campaign_id
    AND (q.status = 'review'
         OR (q.id IS NULL AND EXISTS (SELECT FROM mailroom.attempts f
                                      WHERE f.message_id = c.id AND f.finished_as = 'failed')));
  IF v_ids IS NULL THEN
    RETURN 0;
  END IF;
  RETURN (SELECT count(*) FROM mailroom._retry(v_ids) r WHERE r.status IS DISTINCT FROM r.previous_status);
END
$$;
ALTER FUNCTION mailroom.retry_campaign(bigint) OWNER TO mailroom_owner;
REVOKE ALL ON FUNCTION mailroom.retry_campaign(bigint) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION mailroom.retry_campaign(bigint) TO mailroom_operator;
COMMENT ON FUNCTION mailroom.retry_campaign(bigint) IS
  'Operator: retry every failed or review mail of one campaign (attempts reset, due now), except mail to suppressed addresses. Returns how many left failed/review (queued; held as paused while the campaign is paused).';

COMMIT;
