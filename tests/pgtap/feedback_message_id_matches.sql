-- Tests for mailroom:feedback_message_id_matches
BEGIN;
SELECT plan(11);

SELECT has_function('mailroom', 'feedback_message_id_matches', ARRAY['bigint', 'text'], 'it exists');
SELECT function_privs_are('mailroom', 'feedback_message_id_matches', ARRAY['bigint', 'text'],
  'mailroom_feedback', ARRAY['EXECUTE'], 'the feedback role may check');
SELECT function_privs_are('mailroom', 'feedback_message_id_matches', ARRAY['bigint', 'text'],
  'mailroom_app', ARRAY[]::text[], 'apps may not');
CREATE TEMP TABLE m AS SELECT mailroom.enqueue('ann@example.com', 'Hi', 'B', p_delivery_key => 'order:7:receipt') AS id,
  -- sha256('order:7:receipt'), as runner/mailroom/render.py:message_id computes it (checked by tests/test_inbound.py too)
  substr(encode(sha256('order:7:receipt'), 'hex'), 1, 40) AS hex;
GRANT SELECT ON m TO PUBLIC;
SET ROLE mailroom_feedback;
SELECT is(mailroom.feedback_message_id_matches(id, '<' || hex || '.' || id || '@mail.example.com>'), true,
  'the mail''s own Message-ID matches, whatever the domain') FROM m;
SELECT is(mailroom.feedback_message_id_matches(id, upper(hex) || '.' || id || '@x'), true,
  'case and brackets do not matter') FROM m;
SELECT is(mailroom.feedback_message_id_matches(id, '<' || hex || '@mail.example.com>'), true,
  'the v0.3 form without the id matches by its digest') FROM m;
SELECT is(mailroom.feedback_message_id_matches(id, '<' || hex || '.' || (id + 1) || '@x>'), false,
  'the digest with another id does not') FROM m;
SELECT is(mailroom.feedback_message_id_matches(id, '<0123456789abcdef0123456789abcdef01234567.' || id || '@x>'), false,
  'another digest does not') FROM m;
SELECT is(mailroom.feedback_message_id_matches(id, '<CAF=abc@mail.gmail.com>'), false,
  'a Message-ID mailroom did not write does not') FROM m;
SELECT is(mailroom.feedback_message_id_matches(999999, '<a@b>'), NULL, 'an unknown mail: NULL');
RESET ROLE;
SELECT is((SELECT (digest, mail_id) FROM mailroom._message_id_parts(' <' || repeat('A', 40) || '.0042@Shop.example> ')),
          (repeat('a', 40), 42::numeric), '_message_id_parts: digest lower-cased, id as a number, blanks and brackets dropped');

SELECT * FROM finish();
ROLLBACK;
