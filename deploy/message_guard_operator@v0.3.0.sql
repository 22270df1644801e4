-- Deploy mailroom:message_guard_operator to pg
-- requires: message_guard

-- An operator's retry (retry, retry_campaign, resolve_review 'retry') moves
-- failed or review mail back to 'queued'. Like a runner's retry, that must not
-- escape a paused or cancelled campaign, an inactive schedule or a send
-- window: the same guard function runs for this transition too. (The
-- message_guard trigger fires only for sending -> queued.)

BEGIN;

CREATE TRIGGER messages_guard_operator_requeue
  BEFORE UPDATE OF status ON mailroom.messages
  FOR EACH ROW
  WHEN (OLD.status IN ('failed', 'review') AND NEW.status = 'queued'
        AND (NEW.campaign_id IS NOT NULL OR NEW.schedule_id IS NOT NULL))
  EXECUTE FUNCTION mailroom._message_guard();
COMMENT ON TRIGGER messages_guard_operator_requeue ON mailroom.messages IS
  'Keeps mail an operator retries (failed or review -> queued) from escaping a campaign pause or cancel, an inactive schedule or a send window.';

COMMIT;
