-- Deploy mailroom:message_guard_operator to pg
-- requires: message_guard_operator@v0.3.0
-- requires: split_messages
-- requires: message_guard

-- Nothing is left to create. The trigger messages_guard_operator_requeue
-- lived on the v0.3 messages table and went with it (split_messages); its
-- function went with message_guard's rework. Mail an operator puts back in
-- the queue (retry, retry_campaign, resolve_review 'retry') is checked where
-- all mail is checked now: claim_batch's gate, at claim time, against the
-- campaign's and the schedule's state and the send window. retry and
-- resolve_review also hold a paused campaign's mail as paused and refuse
-- suppressed addresses or cancelled campaigns, as optimisations.

BEGIN;

DO $$
BEGIN
  ASSERT NOT EXISTS (SELECT FROM pg_catalog.pg_trigger WHERE tgname = 'messages_guard_operator_requeue'),
    'mailroom: the v0.3 operator guard trigger is still there';
END
$$;

COMMIT;
