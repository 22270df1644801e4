-- Tests for mailroom:table_messages. v0.4's split_messages replaced the table
-- it created with contents (tests/pgtap/table_contents.sql), the hot queue
-- (table_queue.sql) and a read-only view of the same name (split_messages.sql);
-- what remains of this change is the name and its columns.
BEGIN;
SELECT plan(3);

SELECT has_view('mailroom', 'messages', 'mailroom.messages is a view now');
SELECT columns_are('mailroom', 'messages', ARRAY[
  'id', 'delivery_key', 'status', 'status_reason', 'priority', 'run_at', 'sender', 'to_address', 'to_domain',
  'subject', 'body_text', 'body_html', 'template_key', 'template_vars', 'headers', 'attempts', 'max_attempts',
  'on_ambiguous', 'lease_token', 'leased_until', 'worker', 'claimed_at', 'campaign_id', 'schedule_id',
  'recipient_id', 'recipient_zone', 'last_error', 'created_at', 'updated_at', 'sent_at', 'finished_at', 'stream'],
  'it keeps every column the v0.3 table had, and adds finished_at and stream');
SELECT view_owner_is('mailroom', 'messages', 'mailroom_owner', 'owned by the owner role');

SELECT * FROM finish();
ROLLBACK;
