-- Verify mailroom:split_messages on pg

BEGIN;

SELECT id, delivery_key, status, status_reason, priority, run_at, sender, to_address, to_domain,
       subject, body_text, body_html, template_key, template_vars, headers, attempts,
       max_attempts, on_ambiguous, lease_token, leased_until, worker, claimed_at,
       campaign_id, schedule_id, recipient_id, recipient_zone, last_error, created_at, updated_at,
       sent_at, finished_at
FROM mailroom.messages WHERE false;
SELECT finished_as, status_reason, last_error, finish_key FROM mailroom.attempts WHERE false;
DO $$ BEGIN
  ASSERT (SELECT relkind FROM pg_catalog.pg_class WHERE oid = 'mailroom.messages'::regclass) = 'v',
         'mailroom.messages is still a table';
  ASSERT (SELECT pg_catalog.pg_get_constraintdef(c.oid) FROM pg_catalog.pg_constraint c
          WHERE c.conrelid = 'mailroom.attempts'::regclass AND c.conname = 'attempts_pkey')
         = 'PRIMARY KEY (message_id, finish_key)',
         'the ledger is not keyed by (message_id, finish_key)';
END $$;

ROLLBACK;
