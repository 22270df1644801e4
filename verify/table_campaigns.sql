-- Verify mailroom:table_campaigns on pg

BEGIN;

SELECT id, name, template_key, vars, headers, priority, sender, max_attempts, on_ambiguous, send_at,
       time_zone, window_start, window_end, status, created_at, updated_at, finished_at
FROM mailroom.campaigns WHERE false;
-- The campaign reference, its (campaign_id, recipient_id) unique index and
-- recipient_zone live in mailroom.contents since split_messages (v0.4,
-- verify/table_contents.sql); the read model still shows recipient_zone.
SELECT recipient_zone FROM mailroom.messages WHERE false;

ROLLBACK;
