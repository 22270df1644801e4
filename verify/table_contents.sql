-- Verify mailroom:table_contents on pg

BEGIN;

SELECT id, delivery_key, sender, to_address, to_domain, subject, body_text, body_html,
       template_key, template_vars, headers, priority, max_attempts, on_ambiguous,
       campaign_id, schedule_id, recipient_id, recipient_zone, stream, created_at
FROM mailroom.contents WHERE false;
SELECT 1 / (pg_catalog.to_regclass('mailroom.message_ids') IS NOT NULL)::int;

ROLLBACK;
