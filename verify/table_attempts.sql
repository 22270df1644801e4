-- Verify mailroom:table_attempts on pg

BEGIN;

-- delivery_key went with split_messages (v0.4): the ledger joins contents for it.
SELECT id, message_id, attempt, worker, lease_token, claimed_at, finished_at, reported_at,
       reported, outcome, smtp_code, smtp_enhanced, smtp_text, provider_id, duplicate
FROM mailroom.attempts WHERE false;

ROLLBACK;
