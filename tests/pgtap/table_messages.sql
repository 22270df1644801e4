-- Tests for mailroom:table_messages: since v0.4 (split_messages) mailroom.messages is a
-- read-only view over contents, the hot queue and the finishing ledger row.
BEGIN;
SELECT plan(8);

SELECT has_view('mailroom', 'messages', 'messages is a view');
SELECT view_owner_is('mailroom', 'messages', 'mailroom_owner', 'owned by the owner role');
SELECT has_table('mailroom', 'queue', 'the hot queue is a table');
SELECT has_index('mailroom', 'queue', 'queue_claim_idx', ARRAY['priority', 'run_at', 'id'], 'claim index');
SELECT has_index('mailroom', 'queue', 'queue_reclaim_idx', ARRAY['leased_until'], 'reclaim index');
SELECT columns_are('mailroom', 'messages', ARRAY[
  'id', 'delivery_key', 'status', 'status_reason', 'priority', 'run_at', 'sender', 'to_address', 'to_domain',
  'subject', 'body_text', 'body_html', 'template_key', 'template_vars', 'headers', 'attempts', 'max_attempts',
  'on_ambiguous', 'lease_token', 'leased_until', 'worker', 'claimed_at', 'campaign_id', 'schedule_id',
  'recipient_id', 'recipient_zone', 'last_error', 'created_at', 'updated_at', 'sent_at', 'finished_at'],
  'the v0.3 columns, and finished_at');
SELECT throws_ok($$INSERT INTO mailroom.messages (delivery_key, to_address, subject, body_text) VALUES ('tm-1', 'a@example.com', 's', 'b')$$,
  '55000', NULL, 'the view is not written: the functions write contents and queue');

SET LOCAL ROLE mailroom_operator;
SELECT throws_ok($$SELECT * FROM mailroom.messages$$, '42501', 'permission denied for view messages',
  'no group role reads it directly');
RESET ROLE;

SELECT * FROM finish();
ROLLBACK;
