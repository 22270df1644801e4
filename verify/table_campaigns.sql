-- Verify mailroom:table_campaigns on pg
-- Campaign mail is tied to its campaign in mailroom.messages up to v0.3 and in
-- mailroom.contents from v0.4 (split_messages): this checks whichever holds it,
-- so it passes both when the change is deployed and under `sqitch verify` at HEAD.

BEGIN;

SELECT id, name, template_key, vars, headers, priority, sender, max_attempts, on_ambiguous, send_at,
       time_zone, window_start, window_end, status, created_at, updated_at, finished_at
FROM mailroom.campaigns WHERE false;
DO $$
DECLARE
  v_table regclass := pg_catalog.to_regclass(
    CASE WHEN (SELECT relkind FROM pg_catalog.pg_class WHERE oid = 'mailroom.messages'::regclass) = 'r'
         THEN 'mailroom.messages' ELSE 'mailroom.contents' END);
BEGIN
  ASSERT EXISTS (SELECT FROM pg_catalog.pg_attribute WHERE attrelid = v_table AND attname = 'recipient_zone' AND NOT attisdropped),
    format('%s has no recipient_zone', v_table);
  ASSERT EXISTS (SELECT FROM pg_catalog.pg_constraint WHERE conrelid = v_table AND contype = 'f'
                   AND confrelid = 'mailroom.campaigns'::regclass),
    format('%s.campaign_id does not reference campaigns', v_table);
  ASSERT EXISTS (SELECT FROM pg_catalog.pg_index i JOIN pg_catalog.pg_class c ON c.oid = i.indexrelid
                 WHERE i.indrelid = v_table AND i.indisunique
                   AND c.relname IN ('messages_campaign_recipient_unique', 'contents_campaign_recipient_unique')),
    format('%s lacks the unique (campaign_id, recipient_id) index', v_table);
END
$$;

ROLLBACK;
