-- Deploy mailroom:view_delivered_keys to pg
-- requires: view_delivered_keys@v0.3.0
-- requires: split_messages

-- v0.4: a key went out when its mail finished as sent (the finishing ledger
-- row) or a runner reported a successful send for it, even under a lost
-- lease while the mail is live: both found by the ledger's primary key.
-- The key itself is in contents: a lookup by delivery_key is one probe of
-- contents_delivery_key_unique and one of the ledger's primary key.
-- The state is the queue row's while the mail is live, else the finishing
-- row's; sent_at is the finishing row's finished_at for mail that finished
-- as sent. split_messages dropped the v0.3 view; this creates it again,
-- same columns.

BEGIN;

CREATE VIEW mailroom.delivered_keys WITH (security_barrier) AS
SELECT c.delivery_key,
       c.id AS message_id,
       coalesce(q.status, f.finished_as) AS status,
       CASE WHEN q.id IS NOT NULL THEN q.status_reason ELSE f.status_reason END AS status_reason,
       c.sender,
       c.to_address,
       CASE WHEN f.finished_as = 'sent' THEN f.finished_at END AS sent_at,
       s.first_success_at,
       coalesce(s.successful_attempts, 0) AS successful_attempts,
       s.provider_ids
FROM mailroom.contents c
LEFT JOIN mailroom.queue q ON q.id = c.id
LEFT JOIN mailroom.attempts f ON f.message_id = c.id AND f.finished_as IS NOT NULL
LEFT JOIN LATERAL (
  SELECT min(coalesce(a.reported_at, a.finished_at)) AS first_success_at,
         count(*) AS successful_attempts,
         array_agg(a.provider_id ORDER BY coalesce(a.reported_at, a.finished_at)) FILTER (WHERE a.provider_id IS NOT NULL) AS provider_ids
  FROM mailroom.attempts a
  WHERE a.message_id = c.id AND a.reported = 'sent'
) s ON true
WHERE f.finished_as = 'sent'
   OR EXISTS (SELECT FROM mailroom.attempts a WHERE a.message_id = c.id AND a.reported = 'sent');
ALTER VIEW mailroom.delivered_keys OWNER TO mailroom_owner;
REVOKE ALL ON mailroom.delivered_keys FROM PUBLIC;
GRANT SELECT ON mailroom.delivered_keys TO mailroom_operator;
COMMENT ON VIEW mailroom.delivered_keys IS
  'Delivery keys that already went out: the mail finished as sent, or a runner reported a successful send for it (even under a lost lease). Resending any of these duplicates the mail. Query it by delivery_key before a manual resend. A key pruned with its mail is no longer listed (and can be enqueued again).';
COMMENT ON COLUMN mailroom.delivered_keys.successful_attempts IS
  'Successful sends in the ledger; 0 when an operator resolved a review as sent; more than 1 is a duplicate.';

COMMIT;
