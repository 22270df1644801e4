-- Verify mailroom:table_schedules on pg
-- Schedule mail references its schedule from mailroom.messages up to v0.3 and
-- from mailroom.contents from v0.4 (split_messages): this checks whichever holds it.

BEGIN;

SELECT id, schedule_key, recipient_id, to_address, time_zone, rule, template_key, vars, channel,
       priority, sender, window_start, window_end, active, next_run_at, last_run_at, created_at, updated_at
FROM mailroom.schedules WHERE false;
DO $$
DECLARE
  v_table regclass := pg_catalog.to_regclass(
    CASE WHEN (SELECT relkind FROM pg_catalog.pg_class WHERE oid = 'mailroom.messages'::regclass) = 'r'
         THEN 'mailroom.messages' ELSE 'mailroom.contents' END);
BEGIN
  ASSERT EXISTS (SELECT FROM pg_catalog.pg_constraint WHERE conrelid = v_table AND contype = 'f'
                   AND confrelid = 'mailroom.schedules'::regclass),
    format('%s.schedule_id does not reference schedules', v_table);
END
$$;
SELECT 1/(count(*) - 2) FROM mailroom.settings
WHERE key IN ('schedule_lookahead', 'schedule_batch', 'schedule_max_lateness');

ROLLBACK;
