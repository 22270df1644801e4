-- Tests for mailroom:table_messages
BEGIN;
SELECT plan(14);

SELECT has_table('mailroom', 'messages', 'messages table exists');
SELECT table_owner_is('mailroom', 'messages', 'mailroom_owner', 'owned by the owner role');
SELECT col_is_pk('mailroom', 'messages', 'id', 'id is the primary key');
SELECT col_is_unique('mailroom', 'messages', 'delivery_key', 'delivery keys are unique');
SELECT has_index('mailroom', 'messages', 'messages_claim_idx', ARRAY['priority', 'run_at', 'id'], 'claim index');
SELECT has_index('mailroom', 'messages', 'messages_reclaim_idx', ARRAY['leased_until'], 'reclaim index');
SELECT is((SELECT pg_get_expr(indpred, indrelid) FROM pg_index WHERE indexrelid = 'mailroom.messages_claim_idx'::regclass),
  '(status = ''queued''::text)', 'the claim index covers queued rows only');
SELECT is((SELECT pg_get_expr(indpred, indrelid) FROM pg_index WHERE indexrelid = 'mailroom.messages_reclaim_idx'::regclass),
  '(status = ''sending''::text)', 'the reclaim index covers sending rows only');
SELECT bag_has(
  $$SELECT conname::text FROM pg_constraint WHERE conrelid = 'mailroom.messages'::regclass AND contype = 'c'$$,
  $$VALUES ('messages_status_valid'), ('messages_priority_range'), ('messages_attempts_range'),
           ('messages_on_ambiguous_valid'), ('messages_content_present'),
           ('messages_lease_only_while_sending'), ('messages_headers_object')$$,
  'named CHECK constraints');

INSERT INTO mailroom.messages (delivery_key, to_address, subject, body_text)
VALUES ('tm-1', 'Ann@Example.COM', 's', 'b');
SELECT is((SELECT to_domain FROM mailroom.messages WHERE delivery_key = 'tm-1'), 'example.com',
  'to_domain is the lower-cased domain');
SELECT throws_ok($$INSERT INTO mailroom.messages (delivery_key, to_address, subject, body_text, status)
                   VALUES ('tm-2', 'a@example.com', 's', 'b', 'lost')$$, '23514', NULL, 'unknown status refused');
SELECT throws_ok($$INSERT INTO mailroom.messages (delivery_key, to_address, subject, body_text, status)
                   VALUES ('tm-3', 'a@example.com', 's', 'b', 'sending')$$, '23514', NULL, 'sending needs a lease');
SELECT throws_ok($$INSERT INTO mailroom.messages (delivery_key, to_address)
                   VALUES ('tm-4', 'a@example.com')$$, '23514', NULL, 'content or a template is required');

SET LOCAL ROLE mailroom_operator;
SELECT throws_ok($$SELECT * FROM mailroom.messages$$, '42501', 'permission denied for table messages',
  'no group role reads the table directly');
RESET ROLE;

SELECT * FROM finish();
ROLLBACK;
