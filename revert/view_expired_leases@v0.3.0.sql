-- Revert mailroom:view_expired_leases from pg: back to the v0.2.0 view, which
-- found unreclaimed leases through the ledger row claim_batch opened.

BEGIN;

CREATE OR REPLACE VIEW mailroom.expired_leases WITH (security_barrier) AS
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

COMMIT;
