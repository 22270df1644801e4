-- Verify mailroom:table_messages on pg

BEGIN;

SELECT id, delivery_key, status, status_reason, priority, run_at, sender, to_address, to_domain,
       subject, body_text, body_html, template_key, template_vars, headers, attempts,
       max_attempts, on_ambiguous, lease_token, leased_until, worker, claimed_at,
       campaign_id, schedule_id, recipient_id, last_error, created_at, updated_at, sent_at
FROM mailroom.messages WHERE false;
DO $$ BEGIN
  ASSERT (SELECT count(*) FROM pg_catalog.pg_indexes
          WHERE schemaname = 'mailroom' AND indexname IN ('messages_claim_idx', 'messages_reclaim_idx')) = 2,
         'the partial claim and reclaim indexes are missing';
END $$;

ROLLBACK;
