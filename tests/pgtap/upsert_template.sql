-- pgTAP: mailroom.upsert_template (change upsert_template): the subject is
-- header text, the bodies are capped by max_body_bytes, as enqueue's are.
BEGIN;
SELECT plan(12);

SELECT has_function('mailroom', 'upsert_template', ARRAY['text', 'text', 'text', 'text'],
  'upsert_template exists');
SELECT is_definer('mailroom', 'upsert_template', ARRAY['text', 'text', 'text', 'text'],
  'upsert_template is SECURITY DEFINER');
SELECT function_privs_are('mailroom', 'upsert_template', ARRAY['text', 'text', 'text', 'text'],
  'mailroom_app', ARRAY['EXECUTE'], 'mailroom_app may call upsert_template');
SELECT hasnt_function('mailroom', 'upsert_template', ARRAY['text', 'text', 'text', 'text', 'timestamp with time zone'],
  'upsert_template takes no p_now');

SET ROLE mailroom_app;
SELECT lives_ok($$SELECT mailroom.upsert_template('news', E'Hello\t{{ name }}', repeat('x', 1048576))$$,
  'a TAB in the subject and a body of exactly max_body_bytes are fine');
SELECT throws_ok($$SELECT mailroom.upsert_template('news2', 'Hi', repeat('x', 1048577))$$, '22023',
  'mailroom: body_text: 1048577 bytes is over the maximum of 1048576 bytes', 'text body over max_body_bytes');
SELECT throws_ok($$SELECT mailroom.upsert_template('news2', 'Hi', NULL, repeat('ü', 524289))$$, '22023',
  'mailroom: body_html: 1048578 bytes is over the maximum of 1048576 bytes', 'HTML body over max_body_bytes, counted in bytes');
SELECT throws_ok($$SELECT mailroom.upsert_template('news2', E'Hi\x1b[31m', 'b')$$, '22023',
  'mailroom: subject: contains a control character (only TAB is allowed in a header)', 'escape character in the subject');
SELECT throws_ok($$SELECT mailroom.upsert_template('news2', repeat('s', 65537), 'b')$$, '22023',
  'mailroom: subject: 65537 bytes is over the maximum of 65536 bytes for a header', 'subject over 64 KiB');
SELECT throws_ok($$SELECT mailroom.upsert_template('news2', E'Hi\r\nBcc: x@example.com', 'b')$$, '22023',
  'mailroom: subject: must be given and must not contain CR or LF', 'CR/LF keeps its message');
RESET ROLE;
SELECT is((SELECT array_agg(key ORDER BY key) FROM mailroom.templates WHERE key LIKE 'news%'), ARRAY['news'],
  'the refused calls wrote nothing');
SELECT results_eq($$SELECT created_at, updated_at FROM mailroom.templates WHERE key = 'news'$$,
  $$VALUES (now(), now())$$, 'created_at and updated_at are the database clock, now()');

SELECT * FROM finish();
ROLLBACK;
