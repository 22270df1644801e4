-- Deploy mailroom:view_expired_leases to pg
-- requires: view_expired_leases@v0.3.0
-- requires: split_messages

-- v0.4: a lease that ran out and waits for reclaim is a queue row with status
-- sending whose leased_until has passed (found through queue_reclaim_idx);
-- its attempt has no ledger row yet, so attempt_id is NULL. (v0.3 also joined
-- the ledger for rows a claim before v0.3.0 had opened; split_messages
-- removed those.) Reclaimed ones are the ledger's expired and stale rows
-- (attempts_expired_idx on finished_at serves "the last day"), with the
-- mail's state now: its queue row while live, else its finishing row.
-- split_messages dropped the v0.3 view; this creates it again, same columns.
-- Each row shown costs primary-key probes of contents, the queue and the
-- finishing row (LATERAL ... OFFSET 0: never a join that hashes the whole
-- history).

BEGIN;

CREATE VIEW mailroom.expired_leases WITH (security_barrier) AS
SELECT NULL::bigint AS attempt_id,
       q.id AS message_id,
       c.delivery_key,
       q.sender,
       c.to_address,
       q.worker,
       q.attempts AS attempt,
       q.claimed_at,
       q.leased_until AS expired_at,
       now() - q.leased_until AS expired_for,
       false AS reclaimed,
       q.on_ambiguous,
       q.status,
       CASE WHEN q.on_ambiguous = 'review' THEN 'review'
            WHEN q.attempts >= q.max_attempts THEN 'failed'
            ELSE 'queued' END AS next_status
FROM mailroom.queue q
CROSS JOIN LATERAL (SELECT c.delivery_key, c.to_address FROM mailroom.contents c WHERE c.id = q.id OFFSET 0) c
WHERE q.status = 'sending' AND q.leased_until < now()
UNION ALL
SELECT a.id, a.message_id, c.delivery_key, c.sender, c.to_address, a.worker, a.attempt, a.claimed_at,
       a.finished_at, now() - a.finished_at, true,
       coalesce(s.on_ambiguous, c.on_ambiguous), s.status, s.status
FROM mailroom.attempts a
CROSS JOIN LATERAL (SELECT c.delivery_key, c.sender, c.to_address, c.on_ambiguous
                    FROM mailroom.contents c WHERE c.id = a.message_id OFFSET 0) c
-- Where the mail is now: its queue row while live, else its finishing row.
LEFT JOIN LATERAL (SELECT q.on_ambiguous, q.status FROM mailroom.queue q WHERE q.id = a.message_id
                   UNION ALL
                   SELECT NULL, f.finished_as FROM mailroom.attempts f
                   WHERE f.message_id = a.message_id AND f.finished_as IS NOT NULL
                   LIMIT 1) s ON true
WHERE a.outcome IN ('expired', 'stale');
ALTER VIEW mailroom.expired_leases OWNER TO mailroom_owner;
REVOKE ALL ON mailroom.expired_leases FROM PUBLIC;
GRANT SELECT ON mailroom.expired_leases TO mailroom_operator;
COMMENT ON VIEW mailroom.expired_leases IS
  'Claims whose lease ran out: the runner died or hung, so whether the mail went out is unknown. reclaimed = false rows are queue rows waiting for mailroom.reclaim() (next_status says where they go; attempt_id is NULL until reclaim writes the ledger row); reclaimed = true rows are the ledger''s history (status is where the mail is now: its queue status, or how it finished; an attempt whose runner reported after the expiry has outcome stale and expired_at = the report''s time).';

COMMIT;
