-- Verify mailroom:table_feedback_events on pg

BEGIN;

SELECT id, event_key, kind, message_id, address, status, detail, source, campaign_id, sender, stream, received_at
FROM mailroom.feedback_events WHERE false;

ROLLBACK;
