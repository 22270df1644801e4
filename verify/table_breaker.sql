-- Verify mailroom:table_breaker on pg

BEGIN;

SELECT scope, window_size, min_sample, bounce_warn, bounce_pause, complaint_warn, complaint_pause, updated_at
FROM mailroom.breaker_settings WHERE false;
SELECT 1 / count(*) FROM mailroom.breaker_settings WHERE scope = 'campaign';
SELECT scope, key, delivered_offset, updated_at FROM mailroom.breaker_counts WHERE false;
SELECT sender, paused_at, reason, figures FROM mailroom.sender_pauses WHERE false;
SELECT id, scope, key, tripped_at, reason, delivered, bounced, complained, bounce_rate, complaint_rate, resumed_at
FROM mailroom.breaker_trips WHERE false;

ROLLBACK;
