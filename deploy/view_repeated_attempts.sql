-- Deploy mailroom:view_repeated_attempts to pg
-- requires: view_repeated_attempts@v0.3.0
-- requires: split_messages

-- v0.4: a mail's attempts are its ledger rows (not released claims, and not
-- the cancelled / resolved rows that record a decision without an attempt)
-- plus the attempt in flight, which is simply its queue row while the status
-- is sending (the ledger row is written when the lease ends). The recipient
-- comes from contents. Listing every recipient reads the whole ledger, as in
-- v0.3 (it is an aggregate over history); a query for one recipient filters
-- contents first and probes the ledger by message (attempts_message_idx).
-- split_messages dropped the v0.3 view; this creates it again, same columns.

BEGIN;

CREATE VIEW mailroom.repeated_attempts WITH (security_barrier) AS
WITH per_message AS (
  SELECT substring(c.to_address FROM '^(.*)@[^@]*$') || '@' || c.to_domain AS recipient,
         c.id AS message_id,
         c.recipient_id,
         count(*) AS attempts,
         count(*) FILTER (WHERE a.outcome IN ('retry', 'failed', 'ambiguous', 'expired', 'stale')) AS unsuccessful,
         count(*) FILTER (WHERE a.reported = 'sent') AS successful,
         count(*) FILTER (WHERE a.duplicate) AS duplicates,
         max(a.claimed_at) AS last_claimed_at,
         (array_agg(a.outcome ORDER BY a.claimed_at DESC, a.id DESC))[1] AS last_outcome,
         (array_agg(concat_ws(' ', a.smtp_code, a.smtp_enhanced, a.smtp_text) ORDER BY a.claimed_at DESC, a.id DESC)
            FILTER (WHERE a.smtp_code IS NOT NULL OR a.smtp_text IS NOT NULL))[1] AS last_smtp_reply,
         max(a.claimed_at) FILTER (WHERE a.smtp_code IS NOT NULL OR a.smtp_text IS NOT NULL) AS last_smtp_at
  FROM mailroom.contents c
  JOIN (SELECT a.message_id, a.id, a.claimed_at, a.reported, a.outcome, a.duplicate,
               a.smtp_code, a.smtp_enhanced, a.smtp_text
        FROM mailroom.attempts a
        WHERE a.outcome IS NULL OR a.outcome NOT IN ('released', 'cancelled', 'resolved')
        UNION ALL
        -- The attempt in flight: its ledger row is written when the lease ends.
        SELECT q.id, NULL, q.claimed_at, NULL, NULL, false, NULL, NULL, NULL
        FROM mailroom.queue q
        WHERE q.status = 'sending'
       ) a ON a.message_id = c.id
  GROUP BY 1, c.id, c.recipient_id
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
ALTER VIEW mailroom.repeated_attempts OWNER TO mailroom_owner;
REVOKE ALL ON mailroom.repeated_attempts FROM PUBLIC;
GRANT SELECT ON mailroom.repeated_attempts TO mailroom_operator;
COMMENT ON VIEW mailroom.repeated_attempts IS
  'Recipients (address with the domain lower-cased) with a mail claimed more than once: attempts per mail from the ledger plus the attempt in flight (a queue row that is sending); released claims and decisions without an attempt (cancelled, resolved) do not count.';

COMMIT;
