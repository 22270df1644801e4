-- Deploy mailroom:cancel to pg
-- requires: table_messages
-- requires: retry

BEGIN;

CREATE FUNCTION mailroom.cancel(
  p_ids    bigint[],
  p_reason text        DEFAULT 'cancelled by operator',
  p_now    timestamptz DEFAULT now()
)
RETURNS TABLE (id bigint, previous_status text, status text)
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = mailroom, pg_temp
AS $$
#variable_conflict use_column
BEGIN
  PERFORM mailroom._check_ids(p_ids);
  IF p_reason IS NULL OR p_reason = '' OR length(p_reason) > 200 THEN
    RAISE EXCEPTION 'mailroom: reason: must be 1 to 200 characters' USING ERRCODE = '22023';
  END IF;
  IF p_now IS NULL THEN
    RAISE EXCEPTION 'mailroom: now: must not be NULL' USING ERRCODE = '22023';
  END IF;

  -- Mail being sent right now (status sending) cannot be called back: it is
  -- reported unchanged; cancel it again once its outcome is in.
  RETURN QUERY
  WITH requested AS (
    SELECT DISTINCT r.id FROM unnest(p_ids) AS r(id)
  ),
  before AS (
    SELECT q.id, m.status FROM requested q LEFT JOIN mailroom.messages m ON m.id = q.id
  ),
  moved AS (
    UPDATE mailroom.messages m
    SET status = 'cancelled', status_reason = p_reason, updated_at = p_now
    WHERE m.id IN (SELECT q.id FROM requested q)
      AND m.status IN ('queued', 'paused', 'review', 'failed')
    RETURNING m.id
  )
  SELECT b.id, b.status, CASE WHEN mv.id IS NOT NULL THEN 'cancelled' ELSE b.status END
  FROM before b LEFT JOIN moved mv ON mv.id = b.id
  ORDER BY b.id;
END
$$;
ALTER FUNCTION mailroom.cancel(bigint[], text, timestamptz) OWNER TO mailroom_owner;
REVOKE ALL ON FUNCTION mailroom.cancel(bigint[], text, timestamptz) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION mailroom.cancel(bigint[], text, timestamptz) TO mailroom_operator;
COMMENT ON FUNCTION mailroom.cancel(bigint[], text, timestamptz) IS
  'Operator: cancel queued, paused, review or failed mail (status_reason = p_reason). One row per requested id: previous_status NULL = no such message; status unchanged = not cancellable (sending, sent, already cancelled).';

COMMIT;
