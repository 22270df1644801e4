-- Deploy mailroom:view_expired_leases to pg
-- requires: table_messages
-- requires: table_attempts

BEGIN;

-- Expired leases are rare, so this index stays tiny while it lets the view
-- skip the rest of the ledger. A stale attempt is one whose lease expired and
-- whose runner reported afterwards (mark_outcomes turns expired into stale,
-- keeps finished_at at the expiry and sets reported_at).
CREATE INDEX attempts_expired_idx ON mailroom.attempts (finished_at) WHERE outcome IN ('expired', 'stale');

CREATE VIEW mailroom.expired_leases WITH (security_barrier) AS
SELECT a.id AS attempt_id,
       a.message_id,
       a.delivery_key,
       m.sender,
       m.to_address,
       a.worker,
       a.attempt,
       a.claimed_at,
       m.leased_until AS expired_at,
       now() - m.leased_until AS expired_for,
       false AS reclaimed,
       m.on_ambiguous,
       m.status,
       CASE WHEN m.on_ambiguous = 'review' THEN 'review'
            WHEN m.attempts >= m.max_attempts THEN 'failed'
            ELSE 'queued' END AS next_status
FROM mailroom.messages m
JOIN mailroom.attempts a ON a.message_id = m.id AND a.lease_token = m.lease_token AND a.outcome IS NULL
WHERE m.status = 'sending' AND m.leased_until < now()
UNION ALL
SELECT a.id, a.message_id, a.delivery_key, m.sender, m.to_address, a.worker, a.attempt, a.claimed_at,
       a.finished_at, now() - a.finished_at, true, m.on_ambiguous, m.status, m.status
FROM mailroom.attempts a
JOIN mailroom.messages m ON m.id = a.message_id
WHERE a.outcome IN ('expired', 'stale');
ALTER VIEW mailroom.expired_leases OWNER TO mailroom_owner;
REVOKE ALL ON mailroom.expired_leases FROM PUBLIC;
GRANT SELECT ON mailroom.expired_leases TO mailroom_operator;
COMMENT ON VIEW mailroom.expired_leases IS
  'Claims whose lease ran out: the runner died or hung, so whether the mail went out is unknown. reclaimed = false rows wait for mailroom.reclaim() (next_status says where they go); reclaimed = true rows are the ledger''s history (status is where the message is now; an attempt whose runner reported after the expiry has outcome stale and expired_at = the report''s time).';
COMMENT ON COLUMN mailroom.expired_leases.next_status IS
  'Where reclaim moves (or moved) the message: review (on_ambiguous = review), failed (attempts spent) or queued.';

COMMIT;
