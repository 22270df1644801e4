-- Revert mailroom:breaker_feedback from pg

BEGIN;

DROP TRIGGER feedback_events_breaker ON mailroom.feedback_events;
DROP FUNCTION mailroom._breaker_feedback_event();

COMMIT;
