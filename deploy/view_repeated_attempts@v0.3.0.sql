-- Deploy mailroom:view_repeated_attempts to pg
-- requires: view_repeated_attempts@v0.2.0

-- The ledger row of an attempt in flight is written when its lease ends, so
-- the attempt in flight is read from the lease on the message and counted.

BEGIN;

CREATE OR REPLACE VIEW mailroom.repeated_attempts WITH (security_barrier) AS
WITH per_message AS (
  SELECT substring(m.to_address FROM '^(.*)@[^@]*$') || '@' || m.to_domain AS recipient,
         m.id AS message_id,
         m.recipient_id,
         count(*) AS attempts,
         count(*) FILTER (WHERE a.outcome IN ('retry', 'failed', 'ambiguous', 'expired', 'stale')) AS unsuccessful,
         count(*) FILTER (WHERE a.reported = 'sent') AS successful,
         count(*) FILTER (WHERE a.duplicate) AS duplicates,
         max(a.claimed_at) AS last_claimed_at,
         (array_agg(a.outcome ORDER BY a.claimed_at DESC, a.id DESC))[1] AS last_outcome,
         (array_agg(concat_ws(' ', a.smtp_code, a.smtp_enhanced, a.smtp_text) ORDER BY a.claimed_at DESC, a.id DESC)
            FILTER (WHERE a.smtp_code IS NOT NULL OR a.smtp_text IS NOT NULL))[1] AS last_smtp_reply,
         max(a.claimed_at) FILTER (WHERE a.smtp_code IS NOT NULL OR a.smtp_text IS NOT NULL) AS last_smtp_at
  FROM mailroom.messages m
  JOIN (SELECT a.message_id, a.id, a.claimed_at, a.reported, a.outcome, a.duplicate,
               a.smtp_code, a.smtp_enhanced, a.smtp_text
        FROM mailroom.attempts a
        UNION ALL
        -- The attempt in flight: its ledger row is written when the lease ends.
        SELECT f.id, NULL, f.claimed_at, NULL, NULL, false, NULL, NULL, NULL
        FROM mailroom.messages f
        WHERE f.status = 'sending'
          AND NOT EXISTS (SELECT FROM mailroom.attempts o WHERE o.message_id = f.id AND o.lease_token = f.lease_token)
       ) a ON a.message_id = m.id
  WHERE a.outcome IS DISTINCT FROM 'released'
  GROUP BY 1, m.id, m.recipient_id
)
SELECT p.recipient,
       max(p.recipient_id) AS recipient_id,
       count(*) AS messages,
       count(*) FILTER (WHERE p.attempts > 1) AS repeated_messages,
       sum(p.attempts)::bigint AS attempts,
       max(p.attempts)::integer AS most_attempts,
       sum(p.unsuccessful)::bigint AS unsuccessful,
       sum(p.successful)::bigint AS successful,
       sum(p.duplicates)::bigint AS duplicates,
       max(p.last_claimed_at) AS last_claimed_at,
       (array_agg(p.last_outcome ORDER BY p.last_claimed_at DESC))[1] AS last_outcome,
       (array_agg(p.last_smtp_reply ORDER BY p.last_smtp_at DESC) FILTER (WHERE p.last_smtp_reply IS NOT NULL))[1] AS last_smtp_reply
FROM per_message p
GROUP BY p.recipient
HAVING max(p.attempts) > 1;

COMMIT;
