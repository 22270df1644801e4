-- Verify mailroom:table_attempts on pg
-- (The columns it created that every later version keeps: split_messages
-- moved delivery_key to mailroom.contents.)

BEGIN;

SELECT id, message_id, attempt, worker, lease_token, claimed_at, finished_at, reported_at,
       reported, outcome, smtp_code, smtp_enhanced, smtp_text, provider_id, duplicate
FROM mailroom.attempts WHERE false;

ROLLBACK;
