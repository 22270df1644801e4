-- Verify mailroom:view_queue_stats on pg

BEGIN;

SELECT kind, sender, status, messages, due, oldest_age, oldest_due_age, warning, detail
FROM mailroom.queue_stats WHERE false;
SELECT kind, pid, age, prepared_gid, pins_horizon, horizon_xid_age
FROM mailroom.open_transactions() WHERE false;
SELECT 1/has_table_privilege('mailroom_operator', 'mailroom.queue_stats', 'select')::integer;
SELECT 1/has_function_privilege('mailroom_operator', 'mailroom.open_transactions()', 'execute')::integer;
DO $$
BEGIN
  ASSERT to_regprocedure('mailroom.open_transactions(timestamptz)') IS NULL,
    'open_transactions still takes a clock parameter';
  ASSERT NOT EXISTS (SELECT FROM pg_depend d JOIN pg_rewrite r ON r.oid = d.objid
                     WHERE r.ev_class = 'mailroom.queue_stats'::regclass AND d.refobjid = 'mailroom.messages'::regclass),
    'queue_stats reads the messages read model instead of the queue';
END
$$;

ROLLBACK;
