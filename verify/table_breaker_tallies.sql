-- Verify mailroom:table_breaker_tallies on pg

BEGIN;

SELECT id, sender, campaign_id, delivered, recorded_at FROM mailroom.breaker_pending WHERE false;
SELECT scope, key, backend_pid, delivered, updated_at FROM mailroom.breaker_delivered WHERE false;
SELECT scope, key, at_delivered, bounced, complained, recorded_at FROM mailroom.breaker_bad_events WHERE false;
SELECT 1 / count(*) FROM pg_indexes WHERE schemaname = 'mailroom' AND indexname = 'breaker_bad_events_window_idx';

ROLLBACK;
