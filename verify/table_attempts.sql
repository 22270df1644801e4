-- Verify mailroom:table_attempts on pg

BEGIN;

SELECT id, message_id, delivery_key, attempt, worker, lease_token, claimed_at, finished_at, reported_at,
       reported, outcome, smtp_code, smtp_enhanced, smtp_text, provider_id, duplicate
FROM mailroom.attempts WHERE false;

ROLLBACK;
