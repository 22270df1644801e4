-- Verify mailroom:table_campaigns on pg

BEGIN;

SELECT id, name, template_key, vars, headers, priority, sender, max_attempts, on_ambiguous, send_at,
       time_zone, window_start, window_end, status, created_at, updated_at, finished_at
FROM mailroom.campaigns WHERE false;
SELECT recipient_zone FROM mailroom.messages WHERE false;
SELECT 1/count(*) FROM pg_catalog.pg_constraint WHERE conname = 'messages_campaign_fk';
SELECT 'mailroom.messages_campaign_recipient_unique'::regclass;

ROLLBACK;
