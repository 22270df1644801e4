-- Verify mailroom:table_messages on pg

BEGIN;

SELECT id, delivery_key, status, status_reason, priority, run_at, sender, to_address, to_domain,
       subject, body_text, body_html, template_key, template_vars, headers, attempts,
       max_attempts, on_ambiguous, lease_token, leased_until, worker, claimed_at,
       campaign_id, schedule_id, recipient_id, last_error, created_at, updated_at, sent_at
FROM mailroom.messages WHERE false;
-- Since split_messages (v0.4) mailroom.messages is the read-only view of
-- contents, queue and the ledger under these column names; the claim and
-- reclaim indexes are the queue's (verify/table_queue.sql).

ROLLBACK;
