-- Deploy mailroom:resolve_review to pg
-- requires: table_messages
-- requires: table_suppressions

BEGIN;

CREATE FUNCTION mailroom.resolve_review(
  p_id       bigint,
  p_decision text,
  p_now      timestamptz DEFAULT now()
)
RETURNS text
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = mailroom, pg_temp
AS $$
DECLARE
  v_msg    mailroom.messages%ROWTYPE;
  v_status text;
BEGIN
  IF p_id IS NULL THEN
    RAISE EXCEPTION 'mailroom: id: a message id is required' USING ERRCODE = '22023';
  END IF;
  IF p_decision IS NULL OR p_decision NOT IN ('sent', 'retry', 'cancel') THEN
    RAISE EXCEPTION 'mailroom: decision: must be sent, retry or cancel, got %', coalesce(p_decision, 'NULL')
      USING ERRCODE = '22023';
  END IF;
  IF p_now IS NULL THEN
    RAISE EXCEPTION 'mailroom: now: must not be NULL' USING ERRCODE = '22023';
  END IF;

  SELECT * INTO v_msg FROM mailroom.messages m WHERE m.id = p_id FOR UPDATE;
  IF NOT FOUND THEN
    RAISE EXCEPTION 'mailroom: id: no message with id %', p_id USING ERRCODE = 'P0002';
  END IF;
  IF v_msg.status <> 'review' THEN
    RAISE EXCEPTION 'mailroom: id: message % is %, not in review', p_id, v_msg.status
      USING ERRCODE = '55000', HINT = 'SELECT * FROM mailroom.review_queue lists the mail waiting for a decision.';
  END IF;
  IF p_decision = 'retry'
     AND EXISTS (SELECT FROM mailroom.suppressions s WHERE s.address_key = mailroom._address_key(v_msg.to_address)) THEN
    RAISE EXCEPTION 'mailroom: decision: message % goes to a suppressed address and cannot be retried', p_id
      USING ERRCODE = '55000', HINT = 'Resolve it as cancel.';
  END IF;

  UPDATE mailroom.messages m
  SET status        = CASE p_decision WHEN 'sent' THEN 'sent' WHEN 'retry' THEN 'queued' ELSE 'cancelled' END,
      status_reason = 'review resolved: ' || p_decision,
      sent_at       = CASE WHEN p_decision = 'sent' THEN p_now END,
      attempts      = CASE WHEN p_decision = 'retry' THEN 0 ELSE m.attempts END,
      run_at        = CASE WHEN p_decision = 'retry' THEN p_now ELSE m.run_at END,
      updated_at    = p_now
  WHERE m.id = p_id
  RETURNING m.status INTO v_status;  -- as written: a campaign or schedule guard may hold or cancel a retry

  IF v_status = 'queued' THEN
    PERFORM pg_notify('mailroom', v_msg.sender);
  END IF;
  RETURN v_status;
END
$$;
ALTER FUNCTION mailroom.resolve_review(bigint, text, timestamptz) OWNER TO mailroom_owner;
REVOKE ALL ON FUNCTION mailroom.resolve_review(bigint, text, timestamptz) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION mailroom.resolve_review(bigint, text, timestamptz) TO mailroom_operator;
COMMENT ON FUNCTION mailroom.resolve_review(bigint, text, timestamptz) IS
  'Operator decision on one mail in review: sent (the recipient has it; mark sent, never resend), retry (send again, attempts reset; may duplicate) or cancel. Returns the new status (a retry of paused-campaign mail is held as paused). 55000 when the mail is no longer in review.';

COMMIT;
