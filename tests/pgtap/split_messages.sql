-- Tests for mailroom:split_messages (the move of v0.3 mail with leases in
-- flight is tested in tests/test_upgrade.py: it needs two deploys)
BEGIN;
SELECT plan(10);

SELECT has_view('mailroom', 'messages', 'mailroom.messages is the read model');
SELECT hasnt_table('mailroom', 'messages', 'and no longer a table');
SELECT has_column('mailroom', 'attempts', 'finished_as', 'the ledger says which row finished a mail');
SELECT hasnt_column('mailroom', 'attempts', 'delivery_key', 'the key is the content''s (one copy)');
SELECT col_is_pk('mailroom', 'attempts', ARRAY['message_id', 'finish_key'], 'one finishing row per mail (finish_key 0), found by message');

SELECT mailroom.enqueue('live@example.com', 's', 'b', p_delivery_key => 'sm-live');
INSERT INTO mailroom.suppressions (address_key, address, reason) VALUES ('gone@example.com', 'gone@example.com', 'manual');
SELECT mailroom.enqueue('gone@example.com', 's', 'b', p_delivery_key => 'sm-gone');
SELECT results_eq(
  $$SELECT delivery_key, status, status_reason FROM mailroom.messages WHERE delivery_key LIKE 'sm-%' ORDER BY 1$$,
  $$VALUES ('sm-gone', 'cancelled', 'suppressed'), ('sm-live', 'queued', NULL::text)$$,
  'a live mail shows its queue row, a finished one its finishing ledger row');
SELECT is((SELECT count(*)::int FROM mailroom.queue q JOIN mailroom.contents c USING (id) WHERE c.delivery_key = 'sm-gone'), 0,
  'finished mail has no row in the hot queue');
SELECT throws_ok($$UPDATE mailroom.messages SET status = 'sent'$$, '55000', NULL, 'the read model cannot be written');
SET LOCAL ROLE mailroom_operator;
SELECT throws_ok($$SELECT count(*) FROM mailroom.messages$$, '42501', NULL, 'operators read the views made for them, not this one');
RESET ROLE;
SET LOCAL ROLE mailroom_app;
SELECT throws_ok($$SELECT count(*) FROM mailroom.messages$$, '42501', NULL, 'nor do applications');
RESET ROLE;

SELECT * FROM finish();
ROLLBACK;
