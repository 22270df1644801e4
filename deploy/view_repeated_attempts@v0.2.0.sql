-- Deploy mailroom:view_repeated_attempts to pg
-- requires: table_messages
-- requires: table_attempts

BEGIN;

-- Counted from the ledger per message first (an operator retry restarts a
-- message's attempt numbers, so the rows are counted, not the numbers). The
-- recipient is a grouping column at both levels, so a query for one
-- recipient reaches the messages scan instead of aggregating the whole ledger.
CREATE VIEW mailroom.repeated_attempts WITH (security_barrier) AS
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
  JOIN mailroom.attempts a ON a.message_id = m.id
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
ALTER VIEW mailroom.repeated_attempts OWNER TO mailroom_owner;
REVOKE ALL ON mailroom.repeated_attempts FROM PUBLIC;
GRANT SELECT ON mailroom.repeated_attempts TO mailroom_operator;
COMMENT ON VIEW mailroom.repeated_attempts IS
  'Recipients (address with the domain lowered) with at least one mail claimed more than once, from the ledger (released claims do not count). Shows retry storms, flaky domains and duplicates per person.';
COMMENT ON COLUMN mailroom.repeated_attempts.unsuccessful IS
  'Attempts that ended retry, failed, ambiguous, expired or stale.';
COMMENT ON COLUMN mailroom.repeated_attempts.duplicates IS
  'Successful sends of a delivery key that had already been sent: this recipient got those mails twice.';

COMMIT;
