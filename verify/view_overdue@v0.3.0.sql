-- Verify mailroom:view_overdue on pg

BEGIN;

SELECT id, delivery_key, sender, to_address, priority, run_at, overdue_for, attempts, max_attempts,
       status_reason, last_error, campaign_id, schedule_id, created_at
FROM mailroom.overdue WHERE false;
SELECT 1/has_table_privilege('mailroom_operator', 'mailroom.overdue', 'select')::integer;

ROLLBACK;
