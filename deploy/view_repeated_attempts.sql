-- Deploy mailroom:view_repeated_attempts to pg
-- requires: view_repeated_attempts@v0.3.0
-- requires: split_messages

-- v0.4: a mail's attempts are its ledger rows (not released claims, and not
-- the cancelled / resolved rows that record a decision without an attempt, nor
-- the bounced rows that record a bounce reported after the mail left)
-- plus the attempt in flight, which is simply its queue row while the status
-- is sending (the ledger row is written when the lease ends). The recipient
-- comes from contents.
--
-- Issue 32, item 7: over all mail ever sent, this was an aggregate of the
-- whole history (46 ms with the last day's 10,000 mails alone, 1,639 ms
-- with 400,000 older finished mails besides: bench/operator_reads.py), and
-- its answer grew with the history too. It now covers a bounded window:
-- the live mail (the hot queue) and the mail finished in the last 7 days
-- (its finishing ledger row, by attempts_finished_at_idx), each mail with
-- all its attempts (ledger primary key) and its contents row (primary key).
-- A query for one recipient reads the same window.

BEGIN;

CREATE OR REPLACE VIEW mailroom.repeated_attempts WITH (security_barrier) AS
WITH recent AS (
  -- A mail is live (a queue row) or finished (one finishing ledger row),
  -- never both (retry turns the finishing row back into a plain one), so
  -- UNION ALL. The queue row brings the attempt in flight along: its
  -- ledger row is written when the lease ends.
  SELECT f.message_id AS id, NULL::timestamptz AS sending_since
  FROM mailroom.attempts f
  WHERE f.finished_as IS NOT NULL AND f.finished_at > now() - interval '7 days'
  UNION ALL
  SELECT q.id, CASE WHEN q.status = 'sending' THEN q.claimed_at END FROM mailroom.queue q
),
per_message AS (
  -- The local part (up to the last @) with the lower-cased domain; without
  -- v0.3's regular expression, which made a scan of contents 5 x slower.
  SELECT left(c.to_address, length(c.to_address) - strpos(reverse(c.to_address), '@')) || '@' || c.to_domain AS recipient,
         c.id AS message_id,
         c.recipient_id,
         t.*
  FROM recent r
  -- Each mail's contents row by primary key (OFFSET 0: never a hash join
  -- that reads all of contents, the history); first, so that a query for
  -- one recipient probes the ledger for that recipient's mail only.
  CROSS JOIN LATERAL (SELECT c.id, c.to_address, c.to_domain, c.recipient_id
                      FROM mailroom.contents c WHERE c.id = r.id OFFSET 0) c
  -- Each mail's attempts by key (the ledger's primary key; the aggregate
  -- subquery is never flattened into a join that hashes the whole ledger).
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
          WHERE a.message_id = r.id AND (a.outcome IS NULL OR a.outcome NOT IN ('released', 'cancelled', 'resolved', 'bounced'))
          UNION ALL
          SELECT NULL, r.sending_since, NULL, NULL, false, NULL, NULL, NULL
          WHERE r.sending_since IS NOT NULL) a
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
  'Recipients (address with the domain lower-cased) with a mail claimed more than once, among the live mail and the mail finished in the last 7 days: attempts per mail from the ledger plus the attempt in flight (a queue row that is sending); released claims, decisions without an attempt (cancelled, resolved) and bounces reported later (bounced) do not count.';

COMMIT;
