-- Revert mailroom:retry from pg
-- Back to v0.3.0: retry and retry_campaign with p_now on the messages table
-- (restored by split_messages' revert later in the revert); _check_ids did
-- not change.

BEGIN;

DROP FUNCTION mailroom.retry_campaign(bigint);
DROP FUNCTION mailroom.retry(bigint[]);
DROP FUNCTION mailroom._retry(bigint[]);

CREATE FUNCTION mailroom.retry(p_ids bigint[], p_now timestamptz DEFAULT now())
RETURNS TABLE (id bigint, previous_status text, status text)
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = mailroom, pg_temp
AS $$
#variable_conflict use_column
DECLARE
  v_ids     bigint[];
  v_before  text[];
  v_after   text[];
  v_senders text[];
  v_sender  text;
BEGIN
  PERFORM mailroom._check_ids(p_ids);
  IF p_now IS NULL THEN
    RAISE EXCEPTION 'mailroom: now: must not be NULL' USING ERRCODE = '22023';
  END IF;

  -- Back to the queue, due now, with a fresh attempt budget. Mail to an
  -- address suppressed meanwhile (a hard bounce, an unsubscribe) stays put.
  WITH requested AS (
    SELECT DISTINCT r.id FROM unnest(p_ids) AS r(id)
  ),
  before AS (
    SELECT q.id, m.status FROM requested q LEFT JOIN mailroom.messages m ON m.id = q.id
  ),
  moved AS (
    UPDATE mailroom.messages m
    SET status = 'queued', status_reason = 'operator retry', attempts = 0, run_at = p_now, updated_at = p_now
    WHERE m.id IN (SELECT q.id FROM requested q)
      AND m.status IN ('failed', 'review')
      AND NOT EXISTS (SELECT FROM mailroom.suppressions s WHERE s.address_key = mailroom._address_key(m.to_address))
    RETURNING m.id, m.sender, m.status
  )
  -- The new status as written: a campaign or schedule guard may have held
  -- (paused) or cancelled it instead of queueing it.
  SELECT array_agg(b.id ORDER BY b.id),
         array_agg(b.status ORDER BY b.id),
         array_agg(coalesce(mv.status, b.status) ORDER BY b.id),
         array_agg(DISTINCT mv.sender) FILTER (WHERE mv.status = 'queued')
  INTO v_ids, v_before, v_after, v_senders
  FROM before b LEFT JOIN moved mv ON mv.id = b.id;

  -- Wake idle runners of each sender concerned (delivered at commit).
  FOREACH v_sender IN ARRAY coalesce(v_senders, '{}') LOOP
    PERFORM pg_notify('mailroom', v_sender);
  END LOOP;
  RETURN QUERY SELECT * FROM unnest(v_ids, v_before, v_after);
END
$$;
ALTER FUNCTION mailroom.retry(bigint[], timestamptz) OWNER TO mailroom_owner;
REVOKE ALL ON FUNCTION mailroom.retry(bigint[], timestamptz) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION mailroom.retry(bigint[], timestamptz) TO mailroom_operator;
COMMENT ON FUNCTION mailroom.retry(bigint[], timestamptz) IS
  'Operator: put failed or review mail back in the queue, due now, attempts reset to 0 (mail of a paused campaign is held as paused, of a cancelled campaign or inactive schedule cancelled). One row per requested id: previous_status NULL = no such message; status unchanged = not retryable (another status, or the address is suppressed). Retrying review mail accepts that the recipient may get it twice.';

CREATE FUNCTION mailroom.retry_campaign(p_campaign_id bigint, p_now timestamptz DEFAULT now())
RETURNS integer
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = mailroom, pg_temp
AS $$
DECLARE
  v_retried integer;
  v_senders text[];
  v_sender  text;
BEGIN
  IF p_campaign_id IS NULL OR p_campaign_id < 1 THEN
    RAISE EXCEPTION 'mailroom: campaign_id: must be a positive campaign id, got %', coalesce(p_campaign_id::text, 'NULL')
      USING ERRCODE = '22023';
  END IF;
  IF p_now IS NULL THEN
    RAISE EXCEPTION 'mailroom: now: must not be NULL' USING ERRCODE = '22023';
  END IF;

  WITH moved AS (
    UPDATE mailroom.messages m
    SET status = 'queued', status_reason = 'operator retry', attempts = 0, run_at = p_now, updated_at = p_now
    WHERE m.campaign_id = p_campaign_id
      AND m.status IN ('failed', 'review')
      AND NOT EXISTS (SELECT FROM mailroom.suppressions s WHERE s.address_key = mailroom._address_key(m.to_address))
    RETURNING m.sender, m.status
  )
  SELECT count(*), array_agg(DISTINCT mv.sender) FILTER (WHERE mv.status = 'queued')
  INTO v_retried, v_senders
  FROM moved mv;

  FOREACH v_sender IN ARRAY coalesce(v_senders, '{}') LOOP
    PERFORM pg_notify('mailroom', v_sender);
  END LOOP;
  RETURN v_retried;
END
$$;
ALTER FUNCTION mailroom.retry_campaign(bigint, timestamptz) OWNER TO mailroom_owner;
REVOKE ALL ON FUNCTION mailroom.retry_campaign(bigint, timestamptz) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION mailroom.retry_campaign(bigint, timestamptz) TO mailroom_operator;
COMMENT ON FUNCTION mailroom.retry_campaign(bigint, timestamptz) IS
  'Operator: retry every failed or review mail of one campaign (attempts reset, due now), except mail to suppressed addresses. Returns how many left failed/review (queued; held as paused while the campaign is paused).';

COMMIT;
