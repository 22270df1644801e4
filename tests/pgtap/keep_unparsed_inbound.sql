-- Tests for mailroom:keep_unparsed_inbound (and table_inbound_unparsed).
BEGIN;
SELECT plan(14);
SET LOCAL client_min_messages = warning;

SELECT has_table('mailroom', 'inbound_unparsed', 'inbound_unparsed exists');
SELECT has_function('mailroom', 'keep_unparsed_inbound', ARRAY['bytea', 'text', 'text', 'text'], 'keep_unparsed_inbound exists');
SELECT is_definer('mailroom', 'keep_unparsed_inbound', ARRAY['bytea', 'text', 'text', 'text'], 'SECURITY DEFINER');
SELECT function_privs_are('mailroom', 'keep_unparsed_inbound', ARRAY['bytea', 'text', 'text', 'text'],
  'mailroom_feedback', ARRAY['EXECUTE'], 'the feedback role may keep inbound mail');
SELECT function_privs_are('mailroom', 'keep_unparsed_inbound', ARRAY['bytea', 'text', 'text', 'text'],
  'mailroom_operator', ARRAY[]::text[], 'operators may not write it');

SET ROLE mailroom_feedback;
SELECT ok(mailroom.keep_unparsed_inbound('\xff00fe0d0a'::bytea, 'malformed_mime: no header block', '', 'bounce+1.x@bounce.example.com') > 0,
  'kept: returns its id');
SELECT throws_ok($$SELECT * FROM mailroom.inbound_unparsed$$, '42501', NULL, 'the feedback role cannot read what it kept');
RESET ROLE;
SELECT results_eq($$SELECT raw, size, reason, envelope_from, envelope_to FROM mailroom.inbound_unparsed$$,
  $$VALUES ('\xff00fe0d0a'::bytea, 5, 'malformed_mime: no header block'::text, ''::text, 'bounce+1.x@bounce.example.com'::text)$$,
  'kept byte for byte (not UTF-8, NUL included) with its reason and envelope');
SELECT ok(mailroom.keep_unparsed_inbound(convert_to(repeat('x', 10 * 1024 * 1024), 'UTF8'), 'too_large', NULL, NULL) > 0,
  'a 10 MiB message is kept');

SELECT throws_ok($$SELECT mailroom.keep_unparsed_inbound(NULL, 'r', NULL, NULL)$$, '22023',
  'mailroom: raw: the message is required', 'no message');
SELECT throws_ok($$SELECT mailroom.keep_unparsed_inbound('\x00', '', NULL, NULL)$$, '22023',
  'mailroom: reason: required, at most 500 characters without control characters', 'no reason');
SELECT throws_ok($$SELECT mailroom.keep_unparsed_inbound('\x00', 'r', E'a\nb', NULL)$$, '22023',
  'mailroom: envelope_from: at most 1000 characters without control characters', 'a control character in the envelope');
SELECT throws_ok($$SELECT mailroom.keep_unparsed_inbound(convert_to(repeat('x', 26214401), 'UTF8'), 'r', NULL, NULL)$$, '22023',
  'mailroom: raw: at most 25 MiB (26214400 bytes), got 26214401 bytes', 'over the limit');
SELECT is((SELECT count(*)::int FROM mailroom.inbound_unparsed), 2, 'the bad calls wrote nothing');

SELECT * FROM finish();
ROLLBACK;
