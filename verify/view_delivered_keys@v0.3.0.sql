-- Verify mailroom:view_delivered_keys on pg

BEGIN;

SELECT delivery_key, message_id, status, status_reason, sender, to_address, sent_at,
       first_success_at, successful_attempts, provider_ids
FROM mailroom.delivered_keys WHERE false;
SELECT 1/has_table_privilege('mailroom_operator', 'mailroom.delivered_keys', 'select')::integer;

ROLLBACK;
