-- Tests for mailroom:table_settings
BEGIN;
SELECT plan(9);

SELECT has_table('mailroom', 'settings', 'settings table exists');
SELECT table_owner_is('mailroom', 'settings', 'mailroom_owner', 'owned by the owner role');
SELECT has_function('mailroom', 'set_setting', ARRAY['text', 'text'], 'set_setting(text, text) exists');
SELECT is_definer('mailroom', 'set_setting', ARRAY['text', 'text'], 'set_setting is SECURITY DEFINER');
SELECT function_privs_are('mailroom', 'set_setting', ARRAY['text', 'text'], 'mailroom_operator', ARRAY['EXECUTE'],
  'operators may change settings');
SELECT function_privs_are('mailroom', 'set_setting', ARRAY['text', 'text'], 'mailroom_app', ARRAY[]::text[],
  'apps may not change settings');

SELECT mailroom.set_setting('retry_backoff_base', '5 seconds');
SELECT is(mailroom._setting('retry_backoff_base'), '5 seconds', 'set_setting changes a value');

SELECT throws_ok($$SELECT mailroom.set_setting('no_such_knob', '1')$$, '22023',
  'mailroom: key: no setting named "no_such_knob"', 'an unknown setting is refused');
SELECT is((SELECT count(*)::int FROM mailroom.settings WHERE key = 'no_such_knob'), 0, 'and nothing is written');

SELECT * FROM finish();
ROLLBACK;
