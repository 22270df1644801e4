-- Tests for mailroom:table_attempts, as split_messages and attempts_claimed_at_brin leave the ledger in v0.4
BEGIN;
SELECT plan(12);

SELECT has_table('mailroom', 'attempts', 'the ledger exists');
SELECT table_owner_is('mailroom', 'attempts', 'mailroom_owner', 'owned by the owner role');
SELECT hasnt_fk('mailroom', 'attempts', 'no foreign key: mail leaves the hot queue, its ledger stays (integrity_problems() checks)');
SELECT hasnt_column('mailroom', 'attempts', 'delivery_key', 'the delivery key is in contents, not repeated per attempt');
SELECT has_index('mailroom', 'attempts', 'attempts_message_idx', ARRAY['message_id', 'lease_token'], 'lookup by message and token');
SELECT has_index('mailroom', 'attempts', 'attempts_finished_idx', ARRAY['message_id'], 'one finishing row per mail');
SELECT is((SELECT am.amname::text FROM pg_class c JOIN pg_am am ON am.oid = c.relam
           WHERE c.oid = 'mailroom.attempts_claimed_at_brin'::regclass), 'brin',
  'claim-time windows are served by a BRIN index (no B-tree insertion per attempt)');

SELECT throws_ok($$INSERT INTO mailroom.attempts (message_id, attempt, outcome) VALUES (-1, 1, 'lost')$$,
  '23514', NULL, 'unknown outcome refused');
SELECT throws_ok($$INSERT INTO mailroom.attempts (message_id, attempt, smtp_text, outcome, finished_at)
                   VALUES (-1, 1, repeat('x', 1001), 'failed', now())$$,
  '23514', NULL, 'SMTP text is bounded');
SELECT throws_ok($$INSERT INTO mailroom.attempts (message_id, attempt, outcome) VALUES (-1, 1, 'sent')$$,
  '23514', NULL, 'a finished attempt has a finish time');
SELECT throws_ok($$INSERT INTO mailroom.attempts (message_id, attempt, outcome, finished_at, finished_as)
                   VALUES (-1, 1, 'sent', now(), 'delivered')$$,
  '23514', NULL, 'finished_as is sent, failed or cancelled');
INSERT INTO mailroom.attempts (message_id, attempt, outcome, finished_at, finished_as) VALUES (-1, 1, 'sent', now(), 'sent');
SELECT throws_ok($$INSERT INTO mailroom.attempts (message_id, attempt, outcome, finished_at, finished_as)
                   VALUES (-1, 2, 'cancelled', now(), 'cancelled')$$,
  '23505', NULL, 'a mail finishes once');

SELECT * FROM finish();
ROLLBACK;
