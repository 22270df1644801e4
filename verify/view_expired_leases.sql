-- Verify mailroom:view_expired_leases on pg

BEGIN;

SELECT attempt_id, message_id, delivery_key, sender, to_address, worker, attempt, claimed_at,
       expired_at, expired_for, reclaimed, on_ambiguous, status, next_status
FROM mailroom.expired_leases WHERE false;
SELECT 1/has_table_privilege('mailroom_operator', 'mailroom.expired_leases', 'select')::integer;
SELECT 1/count(*) FROM pg_indexes WHERE schemaname = 'mailroom' AND indexname = 'attempts_expired_idx';
DO $$
BEGIN
  ASSERT NOT EXISTS (SELECT FROM pg_depend d JOIN pg_rewrite r ON r.oid = d.objid
                     WHERE r.ev_class = 'mailroom.expired_leases'::regclass AND d.refobjid = 'mailroom.messages'::regclass),
    'expired_leases reads the messages read model instead of the queue';
END
$$;

ROLLBACK;
