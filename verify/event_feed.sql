-- Verify mailroom:event_feed on pg

BEGIN;

SELECT xid, id, kind, message_id, address, stream, campaign_id, sender, attempt, reason, smtp_code,
       smtp_enhanced, detail, occurred_at
FROM mailroom.events WHERE false;
SELECT has_function_privilege('mailroom.events_since(text, integer, text, bigint, text, text[])', 'execute');
SELECT has_function_privilege('mailroom.events_head()', 'execute');
SELECT has_function_privilege('mailroom.prune_events(integer)', 'execute');
SELECT 1/count(*) FROM pg_catalog.pg_trigger
WHERE tgname IN ('attempts_events', 'feedback_events_events', 'suppressions_events') HAVING count(*) = 3;
SELECT 1/count(*) FROM mailroom.settings WHERE key IN ('event_retention', 'event_retention_max') HAVING count(*) = 2;
SELECT 1/count(*) FROM pg_catalog.pg_indexes
WHERE schemaname = 'mailroom' AND indexname IN ('events_message_idx', 'events_address_idx') HAVING count(*) = 2;
SELECT xid, id FROM mailroom._events_held() WHERE false;
DO $$
BEGIN
  IF EXISTS (SELECT FROM pg_catalog.pg_extension WHERE extname = 'pg_cron') THEN
    ASSERT EXISTS (SELECT FROM cron.job WHERE jobname = 'mailroom-prune-events'),
      'pg_cron job mailroom-prune-events is missing';
  END IF;
END
$$;

ROLLBACK;
