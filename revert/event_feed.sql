-- Revert mailroom:event_feed from pg

BEGIN;

DO $$
BEGIN
  IF EXISTS (SELECT FROM pg_catalog.pg_extension WHERE extname = 'pg_cron') THEN
    PERFORM cron.unschedule(jobid) FROM cron.job WHERE jobname = 'mailroom-prune-events';
  END IF;
END
$$;

DROP FUNCTION mailroom.prune_events(integer);
DROP FUNCTION mailroom._prune_events(integer, timestamptz);
DROP FUNCTION mailroom._events_held();
DELETE FROM mailroom.settings WHERE key IN ('event_retention', 'event_retention_max');
DROP FUNCTION mailroom.events_head();
DROP FUNCTION mailroom.events_since(text, integer, text, bigint, text, text[]);
DROP FUNCTION mailroom._event_kinds_check(text, text[]);
DROP FUNCTION mailroom._event_cursor(text);
DROP TRIGGER suppressions_events ON mailroom.suppressions;
DROP TRIGGER feedback_events_events ON mailroom.feedback_events;
DROP TRIGGER attempts_events ON mailroom.attempts;
DROP FUNCTION mailroom._events_from_suppressions();
DROP FUNCTION mailroom._events_from_feedback();
DROP FUNCTION mailroom._events_from_ledger();
DROP TABLE mailroom.events;

COMMIT;
