-- Deploy mailroom:resolve_review to pg
-- requires: resolve_review@v0.3.0
-- requires: split_messages

-- v0.4: mail waiting for review is a queue row with status review. Deciding
-- sent or cancel finishes it: the queue row is deleted and one ledger row
-- records the decision (outcome resolved, finished_as sent or cancelled,
-- status_reason 'review resolved: <decision>'), in one statement. Deciding
-- retry queues it again in place (attempts reset, due now). Whether it may
-- then leave is claim_batch's decision (suppression, campaign, schedule,
-- window); retry here refuses a suppressed address (the operator learns it
-- now) and holds a paused campaign's mail as paused, with the campaign row
-- locked FOR SHARE so a concurrent resume cannot miss it. No p_now.

BEGIN;

DROP FUNCTION mailroom.resolve_review(bigint, text, timestamptz);

CREATE FUNCTION mailroom.resolve_review(
  p_id       bigint,
  p_decision text
)
RETURNS text
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = mailroom, pg_temp
AS $$
DECLARE
  v_c        mailroom.contents%ROWTYPE;
  v_q        mailroom.queue%ROWTYPE;
  v_campaign text;
  v_status   text;
BEGIN
  IF p_id IS NULL THEN
    RAISE EXCEPTION 'mailroom: id: a message id is required' USING ERRCODE = '22023';
  END IF;
  IF p_decision IS NULL OR p_decision NOT IN ('sent', 'retry', 'cancel') THEN
    RAISE EXCEPTION 'mailroom: decision: must be sent, retry or cancel, got %', coalesce(p_decision, 'NULL')
      USING ERRCODE = '22023';
  END IF;

  SELECT * INTO v_c FROM mailroom.contents c WHERE c.id = p_id;
  IF NOT FOUND THEN
    RAISE EXCEPTION 'mailroom: id: no message with id %', p_id USING ERRCODE = 'P0002';
  END IF;
  IF v_c.campaign_id IS NOT NULL THEN
    SELECT k.status INTO v_campaign FROM mailroom.campaigns k WHERE k.id = v_c.campaign_id FOR SHARE;
  END IF;
  SELECT * INTO v_q FROM mailroom.queue q WHERE q.id = p_id FOR UPDATE;
  IF v_q.id IS NULL OR v_q.status <> 'review' THEN
    SELECT coalesce(v_q.status, (SELECT f.finished_as FROM mailroom.attempts f
                                 WHERE f.message_id = p_id AND f.finished_as IS NOT NULL), 'unknown')
    INTO v_status;
    RAISE EXCEPTION 'mailroom: id: message % is %, not in review', p_id, v_status
      USING ERRCODE = '55000', HINT = 'SELECT * FROM mailroom.review_queue lists the mail waiting for a decision.';
  END IF;

  IF p_decision = 'retry' THEN
    IF EXISTS (SELECT FROM mailroom.suppressions s WHERE s.address_key = mailroom._address_key(v_c.to_address)
                                                     AND (s.stream IS NULL OR s.stream = v_c.stream)) THEN
      RAISE EXCEPTION 'mailroom: decision: message % goes to a suppressed address and cannot be retried', p_id
        USING ERRCODE = '55000', HINT = 'Resolve it as cancel.';
    END IF;
    UPDATE mailroom.queue q
    SET status        = CASE WHEN v_campaign = 'paused' THEN 'paused' ELSE 'queued' END,
        status_reason = 'review resolved: retry',
        attempts      = 0,
        run_at        = now(),
        updated_at    = now()
    WHERE q.id = p_id
    RETURNING q.status INTO v_status;
    IF v_status = 'queued' THEN
      PERFORM pg_notify('mailroom', v_q.sender);
    END IF;
    RETURN v_status;
  END IF;

  -- sent (the recipient has it: never resend) or cancel: finish the mail
  WITH gone AS (
    DELETE FROM mailroom.queue q WHERE q.id = p_id RETURNING q.id, q.attempts, q.last_error
  )
  INSERT INTO mailroom.attempts (message_id, attempt, finished_at, outcome, finished_as, status_reason, last_error)
  SELECT g.id, g.attempts, now(), 'resolved',
         CASE WHEN p_decision = 'sent' THEN 'sent' ELSE 'cancelled' END,
         'review resolved: ' || p_decision, g.last_error
  FROM gone g
  RETURNING finished_as INTO v_status;
  RETURN v_status;
END
$$;
ALTER FUNCTION mailroom.resolve_review(bigint, text) OWNER TO mailroom_owner;
REVOKE ALL ON FUNCTION mailroom.resolve_review(bigint, text) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION mailroom.resolve_review(bigint, text) TO mailroom_operator;
COMMENT ON FUNCTION mailroom.resolve_review(bigint, text) IS
  'Operator decision on one mail in review: sent (the recipient has it; finished as sent, never resent) or cancel (finished as cancelled), each with a resolved ledger row; or retry (queued again, attempts reset; may duplicate). Returns the new status (a retry of paused-campaign mail is held as paused). 55000 when the mail is no longer in review.';

COMMIT;
