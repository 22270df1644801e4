-- Deploy mailroom:view_delivered_keys to pg
-- requires: table_messages
-- requires: table_attempts

BEGIN;

CREATE VIEW mailroom.delivered_keys WITH (security_barrier) AS
SELECT m.delivery_key,
       m.id AS message_id,
       m.status,
       m.status_reason,
       m.sender,
       m.to_address,
       m.sent_at,
       s.first_success_at,
       coalesce(s.successful_attempts, 0) AS successful_attempts,
       s.provider_ids
FROM mailroom.messages m
LEFT JOIN LATERAL (
  SELECT min(coalesce(a.reported_at, a.finished_at)) AS first_success_at,
         count(*) AS successful_attempts,
         array_agg(a.provider_id ORDER BY coalesce(a.reported_at, a.finished_at)) FILTER (WHERE a.provider_id IS NOT NULL) AS provider_ids
  FROM mailroom.attempts a
  WHERE a.message_id = m.id AND a.reported = 'sent'
) s ON true
WHERE m.status = 'sent'
   OR EXISTS (SELECT FROM mailroom.attempts a WHERE a.message_id = m.id AND a.reported = 'sent');
ALTER VIEW mailroom.delivered_keys OWNER TO mailroom_owner;
REVOKE ALL ON mailroom.delivered_keys FROM PUBLIC;
GRANT SELECT ON mailroom.delivered_keys TO mailroom_operator;
COMMENT ON VIEW mailroom.delivered_keys IS
  'Delivery keys that already went out: the message is sent, or a runner reported a successful send for it (even under a lost lease). Resending any of these duplicates the mail. Query it by delivery_key before a manual resend.';
COMMENT ON COLUMN mailroom.delivered_keys.successful_attempts IS
  'Successful sends in the ledger; 0 when an operator resolved a review as sent; more than 1 is a duplicate.';

COMMIT;
