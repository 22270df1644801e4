-- Verify mailroom:view_queue_stats on pg

BEGIN;

SELECT kind, sender, status, messages, due, oldest_age, oldest_due_age, warning, detail
FROM mailroom.queue_stats WHERE false;
SELECT kind, pid, age, prepared_gid, pins_horizon, horizon_xid_age
FROM mailroom.open_transactions() WHERE false;
SELECT 1/has_table_privilege('mailroom_operator', 'mailroom.queue_stats', 'select')::integer;
SELECT 1/has_function_privilege('mailroom_operator', 'mailroom.open_transactions(timestamptz)', 'execute')::integer;

ROLLBACK;
