-- Revert mailroom:prune_feedback from pg

BEGIN;

DO $$
BEGIN
  IF EXISTS (SELECT FROM pg_catalog.pg_extension WHERE extname = 'pg_cron') THEN
    PERFORM cron.unschedule(jobid) FROM cron.job WHERE jobname = 'mailroom-prune-feedback';
  END IF;
END
$$;

DROP FUNCTION mailroom.prune_feedback(integer);
DROP FUNCTION mailroom._prune_feedback(integer, timestamptz);
DELETE FROM mailroom.settings WHERE key IN ('feedback_retention', 'inbound_unparsed_retention');
DROP INDEX mailroom.feedback_events_received_at_idx;

COMMIT;
