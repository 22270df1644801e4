-- Tests for mailroom:feedback_message_id_matches
BEGIN;
SELECT plan(7);

SELECT has_function('mailroom', 'feedback_message_id_matches', ARRAY['bigint', 'text'], 'it exists');
SELECT function_privs_are('mailroom', 'feedback_message_id_matches', ARRAY['bigint', 'text'],
  'mailroom_feedback', ARRAY['EXECUTE'], 'the feedback role may check');
SELECT function_privs_are('mailroom', 'feedback_message_id_matches', ARRAY['bigint', 'text'],
  'mailroom_app', ARRAY[]::text[], 'apps may not');
CREATE TEMP TABLE m AS SELECT mailroom.enqueue('ann@example.com', 'Hi', 'B', p_delivery_key => 'order:7:receipt') AS id;
GRANT SELECT ON m TO PUBLIC;
SET ROLE mailroom_feedback;
-- sha256('order:7:receipt'), as runner/mailroom/render.py:message_id computes it (checked by tests/test_inbound.py too)
SELECT is(mailroom.feedback_message_id_matches((SELECT id FROM m),
            '<' || substr(encode(sha256('order:7:receipt'), 'hex'), 1, 40) || '@mail.example.com>'), true,
  'the mail''s own Message-ID matches, whatever the domain');
SELECT is(mailroom.feedback_message_id_matches((SELECT id FROM m),
            upper(substr(encode(sha256('order:7:receipt'), 'hex'), 1, 40)) || '@x'), true, 'case and brackets do not matter');
SELECT is(mailroom.feedback_message_id_matches((SELECT id FROM m), '<0123456789abcdef0123456789abcdef01234567@x>'), false,
  'another Message-ID does not');
SELECT is(mailroom.feedback_message_id_matches(999999, '<a@b>'), NULL, 'an unknown mail: NULL');
RESET ROLE;

SELECT * FROM finish();
ROLLBACK;
