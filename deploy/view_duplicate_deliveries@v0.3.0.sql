-- Deploy mailroom:view_duplicate_deliveries to pg
-- requires: table_messages
-- requires: table_attempts

BEGIN;

-- Two kinds. confirmed: two runners each reported a successful send. possible:
-- one successful send after an attempt that ended unproven (its lease expired
-- with no report, or the runner reported a timeout after DATA) - the ledger
-- cannot know whether that earlier attempt reached the recipient, so it says
-- so instead of guessing. Both kinds are rare, and this partial index finds
-- their candidates without reading the rest of the ledger.
CREATE INDEX attempts_doubtful_idx ON mailroom.attempts (message_id)
  WHERE duplicate OR reported = 'ambiguous' OR (reported IS NULL AND outcome = 'expired');

CREATE VIEW mailroom.duplicate_deliveries WITH (security_barrier) AS
SELECT a.delivery_key,
       a.message_id,
       m.sender,
       m.to_address,
       m.status,
       CASE WHEN count(*) FILTER (WHERE a.reported = 'sent') > 1 THEN 'confirmed' ELSE 'possible' END AS certainty,
       count(*) FILTER (WHERE a.reported = 'sent') AS successful_attempts,
       count(*) FILTER (WHERE a.reported = 'ambiguous' OR (a.reported IS NULL AND a.outcome = 'expired')) AS unproven_attempts,
       min(coalesce(a.reported_at, a.finished_at)) FILTER (WHERE a.reported = 'sent') AS first_sent_at,
       max(coalesce(a.reported_at, a.finished_at)) FILTER (WHERE a.reported = 'sent') AS last_sent_at,
       array_agg(a.attempt ORDER BY a.claimed_at, a.id) AS attempt_numbers,
       array_agg(a.worker ORDER BY a.claimed_at, a.id) AS workers,
       array_agg(coalesce(a.reported, '-') || '/' || coalesce(a.outcome, 'in flight') ORDER BY a.claimed_at, a.id) AS reports
FROM mailroom.attempts a
JOIN mailroom.messages m ON m.id = a.message_id
WHERE a.message_id IN (SELECT d.message_id FROM mailroom.attempts d
                       WHERE d.duplicate OR d.reported = 'ambiguous' OR (d.reported IS NULL AND d.outcome = 'expired'))
  AND a.outcome IS DISTINCT FROM 'released'
GROUP BY a.delivery_key, a.message_id, m.sender, m.to_address, m.status
HAVING count(*) FILTER (WHERE a.reported = 'sent') > 1
    OR (count(*) FILTER (WHERE a.reported = 'sent') = 1
        AND count(*) FILTER (WHERE a.reported = 'ambiguous' OR (a.reported IS NULL AND a.outcome = 'expired')) > 0);
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
