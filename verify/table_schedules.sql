-- Verify mailroom:table_schedules on pg

BEGIN;

SELECT id, schedule_key, recipient_id, to_address, time_zone, rule, template_key, vars, channel,
       priority, sender, window_start, window_end, active, next_run_at, last_run_at, created_at, updated_at
FROM mailroom.schedules WHERE false;
SELECT 1/count(*) FROM pg_catalog.pg_constraint WHERE conname = 'messages_schedule_fk';
SELECT 1/(count(*) - 2) FROM mailroom.settings
WHERE key IN ('schedule_lookahead', 'schedule_batch', 'schedule_max_lateness');

ROLLBACK;
