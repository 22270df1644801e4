-- pgTAP: message_by_message_id finds a mail by the Message-ID a runner gave it.
BEGIN;
SELECT plan(9);

SELECT has_index('mailroom', 'contents', 'contents_message_ref_idx', 'the Message-ID index exists');
SELECT function_privs_are('mailroom', 'message_by_message_id', ARRAY['text'], 'mailroom_feedback', ARRAY['EXECUTE'],
  'feedback reporters look mail up');
SELECT function_privs_are('mailroom', 'message_by_message_id', ARRAY['text'], 'mailroom_app', ARRAY[]::text[],
  'the app does not');

CREATE TEMP TABLE m AS SELECT mailroom.enqueue('ann@example.com', 'Hi', 'text', p_delivery_key => 'order:42:receipt') AS id;
-- runner/mailroom/render.py: '<' + sha256(delivery key).hexdigest()[:40] + '@' + domain + '>'
CREATE TEMP TABLE mid AS SELECT left(encode(sha256(convert_to('order:42:receipt', 'UTF8')), 'hex'), 40) AS hex;
SELECT is(mailroom.message_by_message_id('<' || (SELECT hex FROM mid) || '@shop.example>'), (SELECT id FROM m),
  'found by its Message-ID');
SELECT is(mailroom.message_by_message_id(upper((SELECT hex FROM mid)) || '@other.example'), (SELECT id FROM m),
  'without brackets, in upper case, under another domain');
SELECT is(mailroom.message_by_message_id('<' || left((SELECT hex FROM mid), 16) || repeat('0', 24) || '@shop.example>'),
  NULL, 'the same 64-bit prefix but not the same digest: not that mail');
SELECT is(mailroom.message_by_message_id('<CAF=abc@mail.gmail.com>'), NULL, 'a Message-ID mailroom did not write: NULL');
SELECT is(mailroom.message_by_message_id(NULL), NULL, 'NULL: NULL');
SELECT throws_ok($$SELECT mailroom.message_by_message_id(repeat('a', 1001))$$, '22023',
  'mailroom: message_id: at most 1000 characters, got 1001', 'an absurdly long one is refused');

SELECT * FROM finish();
ROLLBACK;
