-- Revert mailroom:table_feedback_events from pg

BEGIN;

DROP TABLE mailroom.feedback_events;

COMMIT;
