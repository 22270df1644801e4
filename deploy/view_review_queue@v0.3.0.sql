-- Deploy mailroom:view_review_queue to pg
-- requires: table_messages
-- requires: table_attempts

BEGIN;

CREATE VIEW mailroom.review_queue WITH (security_barrier) AS
SELECT m.id,
       m.delivery_key,
       m.sender,
       m.to_address,
       m.subject,
       m.template_key,
       m.campaign_id,
       m.status_reason,
       m.last_error,
       m.attempts,
       m.updated_at AS in_review_since,
       now() - m.updated_at AS waiting_for,
       l.worker AS last_worker,
       l.claimed_at AS last_claimed_at,
       l.reported AS last_reported,
       l.outcome AS last_outcome,
       nullif(concat_ws(' ', l.smtp_code, l.smtp_enhanced, l.smtp_text), '') AS last_smtp_reply,
       EXISTS (SELECT FROM mailroom.attempts s WHERE s.message_id = m.id AND s.reported = 'sent') AS reported_sent
FROM mailroom.messages m
LEFT JOIN LATERAL (
  SELECT a.* FROM mailroom.attempts a
  WHERE a.message_id = m.id
  ORDER BY a.claimed_at DESC, a.id DESC
  LIMIT 1
) l ON true
WHERE m.status = 'review'
ORDER BY m.updated_at, m.id;
ALTER VIEW mailroom.review_queue OWNER TO mailroom_owner;
REVOKE ALL ON mailroom.review_queue FROM PUBLIC;
GRANT SELECT ON mailroom.review_queue TO mailroom_operator;
COMMENT ON VIEW mailroom.review_queue IS
  'Mail whose delivery could not be proven (lease expired or a timeout after DATA) under on_ambiguous = review. Not sent again until an operator calls mailroom.resolve_review(id, sent | retry | cancel).';
COMMENT ON COLUMN mailroom.review_queue.last_outcome IS
  'The last ledger row: expired (runner died or hung) or ambiguous (the runner reported a timeout after DATA).';
COMMENT ON COLUMN mailroom.review_queue.reported_sent IS
  'A runner reported the mail as sent (normally such a late report settles the review by itself).';

COMMIT;
