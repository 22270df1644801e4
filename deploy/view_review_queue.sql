-- Deploy mailroom:view_review_queue to pg
-- requires: view_review_queue@v0.3.0
-- requires: split_messages

-- v0.4: mail in review is live, so it is a queue row (status review); what
-- it says comes from contents and its last attempt from the ledger (by
-- message, the ledger's primary key). Decisions without an attempt (cancelled,
-- resolved rows) are not attempts. split_messages dropped the v0.3 view;
-- this creates it again, same columns.

BEGIN;

CREATE VIEW mailroom.review_queue WITH (security_barrier) AS
SELECT q.id,
       c.delivery_key,
       q.sender,
       c.to_address,
       c.subject,
       c.template_key,
       c.campaign_id,
       q.status_reason,
       q.last_error,
       q.attempts,
       q.updated_at AS in_review_since,
       now() - q.updated_at AS waiting_for,
       l.worker AS last_worker,
       l.claimed_at AS last_claimed_at,
       l.reported AS last_reported,
       l.outcome AS last_outcome,
       nullif(concat_ws(' ', l.smtp_code, l.smtp_enhanced, l.smtp_text), '') AS last_smtp_reply,
       EXISTS (SELECT FROM mailroom.attempts s WHERE s.message_id = q.id AND s.reported = 'sent') AS reported_sent,
       c.stream
FROM mailroom.queue q
-- One primary-key probe of contents per item (OFFSET 0: never a join that
-- hashes the whole history).
CROSS JOIN LATERAL (SELECT c.delivery_key, c.to_address, c.subject, c.template_key, c.campaign_id, c.stream
                    FROM mailroom.contents c WHERE c.id = q.id OFFSET 0) c
LEFT JOIN LATERAL (
  SELECT a.worker, a.claimed_at, a.reported, a.outcome, a.smtp_code, a.smtp_enhanced, a.smtp_text
  FROM mailroom.attempts a
  WHERE a.message_id = q.id AND (a.outcome IS NULL OR a.outcome NOT IN ('cancelled', 'resolved', 'bounced'))
  ORDER BY a.claimed_at DESC, a.id DESC
  LIMIT 1
) l ON true
WHERE q.status = 'review'
ORDER BY q.updated_at, q.id;
ALTER VIEW mailroom.review_queue OWNER TO mailroom_owner;
REVOKE ALL ON mailroom.review_queue FROM PUBLIC;
GRANT SELECT ON mailroom.review_queue TO mailroom_operator;
COMMENT ON VIEW mailroom.review_queue IS
  'Mail whose delivery could not be proven (lease expired or a timeout after DATA) under on_ambiguous = review: queue rows in status review. Not sent again until an operator calls mailroom.resolve_review(id, sent | retry | cancel).';
COMMENT ON COLUMN mailroom.review_queue.last_outcome IS
  'The last attempt in the ledger: expired (runner died or hung) or ambiguous (the runner reported a timeout after DATA).';
COMMENT ON COLUMN mailroom.review_queue.reported_sent IS
  'A runner reported the mail as sent (normally such a late report settles the review by itself).';

COMMIT;
