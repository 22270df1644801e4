-- Deploy mailroom:view_expired_leases to pg
-- requires: view_expired_leases@v0.2.0

-- An unreclaimed expired lease has no ledger row any more (the row is written
-- when the lease ends, by reclaim): it is read from the message, which holds
-- the lease. attempt_id is NULL for those rows, unless the claim was made by
-- a claim_batch before v0.3.0, which opened a row.

BEGIN;

CREATE OR REPLACE VIEW mailroom.expired_leases WITH (security_barrier) AS
SELECT a.id AS attempt_id,
       m.id AS message_id,
       m.delivery_key,
       m.sender,
       m.to_address,
       m.worker,
       m.attempts AS attempt,
       m.claimed_at,
       m.leased_until AS expired_at,
       now() - m.leased_until AS expired_for,
       false AS reclaimed,
       m.on_ambiguous,
       m.status,
       CASE WHEN m.on_ambiguous = 'review' THEN 'review'
            WHEN m.attempts >= m.max_attempts THEN 'failed'
            ELSE 'queued' END AS next_status
FROM mailroom.messages m
LEFT JOIN mailroom.attempts a ON a.message_id = m.id AND a.lease_token = m.lease_token AND a.outcome IS NULL
WHERE m.status = 'sending' AND m.leased_until < now()
UNION ALL
SELECT a.id, a.message_id, a.delivery_key, m.sender, m.to_address, a.worker, a.attempt, a.claimed_at,
       a.finished_at, now() - a.finished_at, true, m.on_ambiguous, m.status, m.status
FROM mailroom.attempts a
JOIN mailroom.messages m ON m.id = a.message_id
WHERE a.outcome IN ('expired', 'stale');
COMMENT ON VIEW mailroom.expired_leases IS
  'Claims whose lease ran out: the runner died or hung, so whether the mail went out is unknown. reclaimed = false rows wait for mailroom.reclaim() (next_status says where they go; read from the message, which holds the lease, so attempt_id is NULL until reclaim writes the ledger row); reclaimed = true rows are the ledger''s history (status is where the message is now; an attempt whose runner reported after the expiry has outcome stale and expired_at = the report''s time).';

COMMIT;
