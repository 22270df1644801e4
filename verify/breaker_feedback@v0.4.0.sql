-- Verify mailroom:breaker_feedback on pg

BEGIN;

SELECT 'mailroom._breaker_feedback_event()'::regprocedure;
SELECT 1 / count(*) FROM pg_catalog.pg_trigger
WHERE tgrelid = 'mailroom.feedback_events'::regclass AND tgname = 'feedback_events_breaker' AND NOT tgisinternal;

ROLLBACK;
