-- Revert mailroom:view_repeated_attempts from pg: the @v0.4.0 view (same columns), over all of
-- the history again.

-- v0.4: a mail's attempts are its ledger rows (not released claims, and not
-- the cancelled / resolved rows that record a decision without an attempt, nor
-- the bounced rows that record a bounce reported after the mail left)
-- plus the attempt in flight, which is simply its queue row while the status
-- is sending (the ledger row is written when the lease ends). The recipient
-- comes from contents. Listing every recipient reads all of contents and
-- probes the ledger once per mail: an aggregate over the history, as in
-- v0.3. A query for one recipient filters contents (there is no address
-- index: a scan of contents) and probes the ledger for that recipient's
-- mail only.
-- split_messages dropped the v0.3 view; this creates it again, same columns.

BEGIN;

CREATE OR REPLACE VIEW mailroom.repeated_attempts WITH (security_barrier) AS
WITH per_message AS (
  -- The local part (up to the last @) with the lower-cased domain; without
  -- v0.3's regular expression, which made a scan of contents 5 x slower.
  SELECT left(c.to_address, length(c.to_address) - strpos(reverse(c.to_address), '@')) || '@' || c.to_domain AS recipient,
         c.id AS message_id,
         c.recipient_id,
         t.*
  FROM mailroom.contents c
  -- Each mail's attempts by key (the ledger's primary key; the aggregate
  -- subquery is never flattened into a join that hashes the whole ledger),
  -- so asking for one recipient reads contents and that recipient's rows.
  CROSS JOIN LATERAL (
    SELECT count(*) AS attempts,
           count(*) FILTER (WHERE a.outcome IN ('retry', 'failed', 'ambiguous', 'expired', 'stale')) AS unsuccessful,
           count(*) FILTER (WHERE a.reported = 'sent') AS successful,
           count(*) FILTER (WHERE a.duplicate) AS duplicates,
           max(a.claimed_at) AS last_claimed_at,
           (array_agg(a.outcome ORDER BY a.claimed_at DESC, a.id DESC))[1] AS last_outcome,
           (array_agg(concat_ws(' ', a.smtp_code, a.smtp_enhanced, a.smtp_text) ORDER BY a.claimed_at DESC, a.id DESC)
              FILTER (WHERE a.smtp_code IS NOT NULL OR a.smtp_text IS NOT NULL))[1] AS last_smtp_reply,
           max(a.claimed_at) FILTER (WHERE a.smtp_code IS NOT NULL OR a.smtp_text IS NOT NULL) AS last_smtp_at
    FROM (SELECT a.id, a.claimed_at, a.reported, a.outcome, a.duplicate, a.smtp_code, a.smtp_enhanced, a.smtp_text
          FROM mailroom.attempts a
          WHERE a.message_id = c.id AND (a.outcome IS NULL OR a.outcome NOT IN ('released', 'cancelled', 'resolved', 'bounced'))
          UNION ALL
          -- The attempt in flight: its ledger row is written when the lease ends.
          SELECT NULL, q.claimed_at, NULL, NULL, false, NULL, NULL, NULL
          FROM mailroom.queue q
          WHERE q.id = c.id AND q.status = 'sending') a
  ) t
  WHERE t.attempts > 0
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
  'Recipients (address with the domain lower-cased) with a mail claimed more than once: attempts per mail from the ledger plus the attempt in flight (a queue row that is sending); released claims, decisions without an attempt (cancelled, resolved) and bounces reported later (bounced) do not count.';

COMMIT;
