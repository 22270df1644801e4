-- Deploy mailroom:view_duplicate_deliveries to pg
-- requires: view_duplicate_deliveries@v0.3.0
-- requires: split_messages

-- v0.4: the candidates are found as before, through attempts_doubtful_idx
-- (created by this change in v0.1.0 and kept on the ledger), so the view
-- never reads the rest of the ledger. The delivery key is in contents now
-- (the ledger lost its copy) and the mail's state is its queue row while
-- live, else its finishing row. Decisions without an attempt (cancelled,
-- resolved rows) and released claims are not attempts. split_messages
-- dropped the v0.3 view; this creates it again, same columns.
--
-- Two kinds. confirmed: two runners each reported a successful send.
-- possible: one successful send after an attempt that ended unproven (its
-- lease expired with no report, or the runner reported a timeout after DATA)
-- - the ledger cannot know whether that earlier attempt reached the
-- recipient, so it says so instead of guessing.

BEGIN;

CREATE VIEW mailroom.duplicate_deliveries WITH (security_barrier) AS
SELECT c.delivery_key,
       d.message_id,
       c.sender,
       c.to_address,
       s.status,
       CASE WHEN x.successful_attempts > 1 THEN 'confirmed' ELSE 'possible' END AS certainty,
       x.successful_attempts,
       x.unproven_attempts,
       x.first_sent_at,
       x.last_sent_at,
       x.attempt_numbers,
       x.workers,
       x.reports
-- The candidates: mails with a doubtful attempt (attempts_doubtful_idx).
-- Everything else is read per candidate by key (LATERAL ... OFFSET 0 and
-- the aggregate subquery are never flattened into joins that would hash
-- the whole ledger or all of contents).
FROM (SELECT DISTINCT a.message_id FROM mailroom.attempts a
      WHERE a.duplicate OR a.reported = 'ambiguous' OR (a.reported IS NULL AND a.outcome = 'expired')) d
CROSS JOIN LATERAL (
  SELECT count(*) FILTER (WHERE a.reported = 'sent') AS successful_attempts,
         count(*) FILTER (WHERE a.reported = 'ambiguous' OR (a.reported IS NULL AND a.outcome = 'expired')) AS unproven_attempts,
         min(coalesce(a.reported_at, a.finished_at)) FILTER (WHERE a.reported = 'sent') AS first_sent_at,
         max(coalesce(a.reported_at, a.finished_at)) FILTER (WHERE a.reported = 'sent') AS last_sent_at,
         array_agg(a.attempt ORDER BY a.claimed_at, a.id) AS attempt_numbers,
         array_agg(a.worker ORDER BY a.claimed_at, a.id) AS workers,
         array_agg(coalesce(a.reported, '-') || '/' || coalesce(a.outcome, 'in flight') ORDER BY a.claimed_at, a.id) AS reports
  FROM mailroom.attempts a
  WHERE a.message_id = d.message_id
    AND (a.outcome IS NULL OR a.outcome NOT IN ('released', 'cancelled', 'resolved', 'bounced'))
) x
CROSS JOIN LATERAL (SELECT c.delivery_key, c.sender, c.to_address FROM mailroom.contents c
                    WHERE c.id = d.message_id OFFSET 0) c
-- Where the mail is now: its queue row while live, else its finishing row.
LEFT JOIN LATERAL (SELECT q.status FROM mailroom.queue q WHERE q.id = d.message_id
                   UNION ALL
                   SELECT f.finished_as FROM mailroom.attempts f
                   WHERE f.message_id = d.message_id AND f.finished_as IS NOT NULL
                   LIMIT 1) s ON true
WHERE x.successful_attempts > 1
   OR (x.successful_attempts = 1 AND x.unproven_attempts > 0);
ALTER VIEW mailroom.duplicate_deliveries OWNER TO mailroom_owner;
REVOKE ALL ON mailroom.duplicate_deliveries FROM PUBLIC;
GRANT SELECT ON mailroom.duplicate_deliveries TO mailroom_operator;
COMMENT ON VIEW mailroom.duplicate_deliveries IS
  'Delivery keys sent more than once (certainty = confirmed: more than one successful send in the ledger) or maybe more than once (possible: one successful send after an attempt whose fate is unknown - lease expired unreported, or timeout after DATA). Check a possible one downstream by its Message-ID.';
COMMENT ON COLUMN mailroom.duplicate_deliveries.certainty IS
  'confirmed: the recipient got it at least twice; possible: it may have (on_ambiguous = retry resent after an unproven attempt).';
COMMENT ON COLUMN mailroom.duplicate_deliveries.reports IS
  'Each attempt as reported/outcome in claim order, e.g. {-/expired,sent/sent}: what the runner said and what the queue made of it.';

COMMIT;
