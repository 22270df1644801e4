-- pgTAP: message_by_message_id finds a mail by the Message-ID a runner gave it.
BEGIN;
SELECT plan(13);

SELECT hasnt_index('mailroom', 'contents', 'contents_message_ref_idx',
  'no index of digests: the id in the Message-ID finds the mail by primary key');
SELECT function_privs_are('mailroom', 'message_by_message_id', ARRAY['text'], 'mailroom_feedback', ARRAY['EXECUTE'],
  'feedback reporters look mail up');
SELECT function_privs_are('mailroom', 'message_by_message_id', ARRAY['text'], 'mailroom_app', ARRAY[]::text[],
  'the app does not');

CREATE TEMP TABLE m AS SELECT mailroom.enqueue('ann@example.com', 'Hi', 'text', p_delivery_key => 'order:42:receipt') AS id;
SELECT mailroom.enqueue('bob@example.com', 'Hi', 'text', p_delivery_key => 'order:43:receipt');
-- runner/mailroom/render.py: '<' + sha256(delivery key).hexdigest()[:40] + '.' + id + '@' + domain + '>'
CREATE TEMP TABLE mid AS SELECT left(encode(sha256(convert_to('order:42:receipt', 'UTF8')), 'hex'), 40) AS hex,
                                (SELECT id FROM m) AS id;
SELECT is(mailroom.message_by_message_id('<' || hex || '.' || id || '@shop.example>'), (SELECT id FROM m),
  'found by its Message-ID') FROM mid;
SELECT is(mailroom.message_by_message_id(upper(hex) || '.' || id || '@other.example'), (SELECT id FROM m),
  'without brackets, in upper case, under another domain') FROM mid;
SELECT is(mailroom.message_by_message_id('<' || hex || '.' || (id + 1) || '@shop.example>'), NULL,
  'the digest with another mail''s id: not that mail (a made-up id finds nothing)') FROM mid;
SELECT is(mailroom.message_by_message_id('<' || repeat('0', 40) || '.' || id || '@shop.example>'), NULL,
  'the id with another digest: not that mail') FROM mid;
SELECT is(mailroom.message_by_message_id('<' || hex || '.999999999@shop.example>'), NULL,
  'an id no mail has (pruned): NULL') FROM mid;
SELECT is(mailroom.message_by_message_id('<' || hex || '.99999999999999999999@shop.example>'), NULL,
  'an id past bigint: NULL, no error') FROM mid;
SELECT is(mailroom.message_by_message_id('<' || hex || '@shop.example>'), NULL,
  'the v0.3 form without the id cannot be found (VERP still names a bounce''s mail)') FROM mid;
SELECT is(mailroom.message_by_message_id('<CAF=abc@mail.gmail.com>'), NULL, 'a Message-ID mailroom did not write: NULL');
SELECT is(mailroom.message_by_message_id(NULL), NULL, 'NULL: NULL');
SELECT throws_ok($$SELECT mailroom.message_by_message_id(repeat('a', 1001))$$, '22023',
  'mailroom: message_id: at most 1000 characters, got 1001', 'an absurdly long one is refused');

SELECT * FROM finish();
ROLLBACK;
