-- Verify mailroom:table_schedules on pg

BEGIN;

SELECT id, schedule_key, recipient_id, to_address, time_zone, rule, template_key, vars, channel,
       priority, sender, window_start, window_end, active, next_run_at, last_run_at, created_at, updated_at
FROM mailroom.schedules WHERE false;
-- The schedule reference lives in mailroom.contents since split_messages (v0.4).
SELECT 1/(count(*) - 2) FROM mailroom.settings
WHERE key IN ('schedule_lookahead', 'schedule_batch', 'schedule_max_lateness');

ROLLBACK;
