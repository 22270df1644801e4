-- Deploy mailroom:message_guard to pg
-- requires: message_guard@v0.3.0
-- requires: split_messages

-- The requeue trigger messages_guard_requeue lived on the v0.3 messages
-- table and went with it (split_messages). It could not be made safe anyway:
-- it read the campaign or schedule with a plain SELECT in the transaction
-- that re-queued the mail, so a pause, cancel or deactivation that committed
-- while that transaction was open was missed (issue 13, hole 2). v0.4 decides
-- at claim time instead: claim_batch's gate reads the campaign's and the
-- schedule's state for every mail it is about to hand out, in the claiming
-- statement, parks (paused), finishes (cancelled: campaign_cancelled,
-- schedule_inactive) or re-times (send window) what fails and never returns
-- it. So the trigger's function has nothing left to guard and is dropped.

BEGIN;

DROP FUNCTION mailroom._message_guard();

COMMIT;
