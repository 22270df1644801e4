-- Tests for mailroom:table_attempts
BEGIN;
SELECT plan(7);

SELECT has_table('mailroom', 'attempts', 'the ledger exists');
SELECT table_owner_is('mailroom', 'attempts', 'mailroom_owner', 'owned by the owner role');
SELECT fk_ok('mailroom', 'attempts', 'message_id', 'mailroom', 'messages', 'id', 'attempts belong to messages');
SELECT has_index('mailroom', 'attempts', 'attempts_message_idx', ARRAY['message_id', 'lease_token'], 'lookup by message and token');

INSERT INTO mailroom.messages (delivery_key, to_address, subject, body_text) VALUES ('ta-1', 'a@example.com', 's', 'b');
SELECT throws_ok($$INSERT INTO mailroom.attempts (message_id, delivery_key, attempt, outcome)
                   SELECT id, delivery_key, 1, 'lost' FROM mailroom.messages WHERE delivery_key = 'ta-1'$$,
  '23514', NULL, 'unknown outcome refused');
SELECT throws_ok($$INSERT INTO mailroom.attempts (message_id, delivery_key, attempt, smtp_text, outcome, finished_at)
                   SELECT id, delivery_key, 1, repeat('x', 1001), 'failed', now() FROM mailroom.messages WHERE delivery_key = 'ta-1'$$,
  '23514', NULL, 'SMTP text is bounded');
SELECT throws_ok($$INSERT INTO mailroom.attempts (message_id, delivery_key, attempt, outcome)
                   SELECT id, delivery_key, 1, 'sent' FROM mailroom.messages WHERE delivery_key = 'ta-1'$$,
  '23514', NULL, 'a finished attempt has a finish time');

SELECT * FROM finish();
ROLLBACK;
