-- Verify mailroom:prune_feedback on pg

BEGIN;

SELECT has_function_privilege('mailroom.prune_feedback(integer)', 'execute');
SELECT has_function_privilege('mailroom._prune_feedback(integer, timestamptz)', 'execute');
SELECT 1/count(*) FROM pg_catalog.pg_indexes
WHERE schemaname = 'mailroom' AND indexname = 'feedback_events_received_at_idx';
SELECT 1/count(*) FROM mailroom.settings WHERE key = 'feedback_retention';
SELECT 1/count(*) FROM mailroom.settings WHERE key = 'inbound_unparsed_retention';
DO $$
BEGIN
  IF EXISTS (SELECT FROM pg_catalog.pg_extension WHERE extname = 'pg_cron') THEN
    ASSERT EXISTS (SELECT FROM cron.job WHERE jobname = 'mailroom-prune-feedback'),
      'pg_cron job mailroom-prune-feedback is missing';
  END IF;
END
$$;

ROLLBACK;
