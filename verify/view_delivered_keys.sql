-- Verify mailroom:view_delivered_keys on pg

BEGIN;

SELECT delivery_key, message_id, status, status_reason, sender, to_address, sent_at,
       first_success_at, successful_attempts, provider_ids
FROM mailroom.delivered_keys WHERE false;
SELECT 1/has_table_privilege('mailroom_operator', 'mailroom.delivered_keys', 'select')::integer;
DO $$
BEGIN
  ASSERT NOT EXISTS (SELECT FROM pg_depend d JOIN pg_rewrite r ON r.oid = d.objid
                     WHERE r.ev_class = 'mailroom.delivered_keys'::regclass AND d.refobjid = 'mailroom.messages'::regclass),
    'delivered_keys reads the messages read model instead of the tables';
END
$$;

ROLLBACK;
