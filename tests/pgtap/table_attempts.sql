-- Tests for mailroom:table_attempts
BEGIN;
SELECT plan(7);

SELECT has_table('mailroom', 'attempts', 'the ledger exists');
SELECT table_owner_is('mailroom', 'attempts', 'mailroom_owner', 'owned by the owner role');
-- No FK since split_messages (v0.4): its check cost 35-40 % of mark_outcomes; integrity is checked instead.
SELECT col_isnt_fk('mailroom', 'attempts', 'message_id', 'the ledger carries no FK to the mail');
SELECT has_index('mailroom', 'attempts', 'attempts_message_idx', ARRAY['message_id', 'lease_token'], 'lookup by message and token');

INSERT INTO mailroom.contents (delivery_key, to_address, subject, body_text) VALUES ('ta-1', 'a@example.com', 's', 'b');
SELECT throws_ok($$INSERT INTO mailroom.attempts (message_id, attempt, outcome)
                   SELECT id, 1, 'lost' FROM mailroom.contents WHERE delivery_key = 'ta-1'$$,
  '23514', NULL, 'unknown outcome refused');
SELECT throws_ok($$INSERT INTO mailroom.attempts (message_id, attempt, smtp_text, outcome, finished_at)
                   SELECT id, 1, repeat('x', 1001), 'failed', now() FROM mailroom.contents WHERE delivery_key = 'ta-1'$$,
  '23514', NULL, 'SMTP text is bounded');
SELECT throws_ok($$INSERT INTO mailroom.attempts (message_id, attempt, outcome)
                   SELECT id, 1, 'sent' FROM mailroom.contents WHERE delivery_key = 'ta-1'$$,
  '23514', NULL, 'a finished attempt has a finish time');

SELECT * FROM finish();
ROLLBACK;
