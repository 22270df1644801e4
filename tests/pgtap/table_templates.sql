-- Tests for mailroom:table_templates
BEGIN;
SELECT plan(16);

SELECT has_table('mailroom', 'templates', 'templates table exists');
SELECT col_is_pk('mailroom', 'templates', 'key', 'keyed by key');
SELECT has_function('mailroom', 'upsert_template', ARRAY['text', 'text', 'text', 'text']);
SELECT has_function('mailroom', 'get_templates', ARRAY['text[]']);
SELECT is_definer('mailroom', 'upsert_template', ARRAY['text', 'text', 'text', 'text']);
SELECT is_definer('mailroom', 'get_templates', ARRAY['text[]']);
SELECT function_privs_are('mailroom', 'upsert_template', ARRAY['text', 'text', 'text', 'text'],
  'mailroom_app', ARRAY['EXECUTE'], 'apps may write templates');
SELECT function_privs_are('mailroom', 'get_templates', ARRAY['text[]'], 'mailroom_runner', ARRAY['EXECUTE'],
  'runners may read templates');

SELECT mailroom.upsert_template('welcome', 'Hello {{ name }}', 'Hi {{ name }}', NULL);
UPDATE mailroom.templates SET created_at = now() - interval '1 day', updated_at = now() - interval '1 day' WHERE key = 'welcome';
SELECT mailroom.upsert_template('welcome', 'Welcome {{ name }}', 'Hi {{ name }}', '<p>Hi</p>');
SELECT results_eq(
  $$SELECT key, subject, body_html, updated_at FROM mailroom.get_templates(ARRAY['welcome', 'missing'])$$,
  $$VALUES ('welcome'::text, 'Welcome {{ name }}'::text, '<p>Hi</p>'::text, now())$$,
  'upsert replaces the template and moves updated_at to now(); unknown keys are absent');

SELECT throws_ok($$SELECT mailroom.upsert_template('bad key', 's', 't')$$, '22023',
  'mailroom: key: "bad key" is not a template key (letters, digits and _ . : / -, at most 128)', 'bad key refused');
SELECT throws_ok($$SELECT mailroom.upsert_template('k', E'a\nBcc: x@example.com', 't')$$, '22023',
  'mailroom: subject: must be given and must not contain CR or LF', 'subject with LF refused');
SELECT throws_ok($$SELECT mailroom.upsert_template('k', 's', NULL, NULL)$$, '22023',
  'mailroom: body_text: a template needs a text or an HTML body', 'template without a body refused');
SELECT is((SELECT count(*)::int FROM mailroom.templates WHERE key = 'k'), 0, 'nothing written by refused calls');

SET LOCAL ROLE mailroom_app;
SELECT lives_ok($$SELECT mailroom.upsert_template('as-app', 's', 't')$$, 'the app role can upsert');
SELECT throws_ok($$SELECT * FROM mailroom.templates$$, '42501', 'permission denied for table templates',
  'the app role cannot read the table directly');
SELECT throws_ok($$SELECT * FROM mailroom.get_templates(ARRAY['welcome'])$$, '42501',
  'permission denied for function get_templates', 'the app role cannot call get_templates');
RESET ROLE;

SELECT * FROM finish();
ROLLBACK;
