-- pgTAP: mailroom.cache_delete_prefix
BEGIN;
SELECT plan(12);

SELECT has_function('mailroom', 'cache_delete_prefix', ARRAY['text'], 'cache_delete_prefix(text) exists');
SELECT is_definer('mailroom', 'cache_delete_prefix', ARRAY['text'], 'cache_delete_prefix is SECURITY DEFINER');
SELECT function_privs_are('mailroom', 'cache_delete_prefix', ARRAY['text'], 'mailroom_app', ARRAY['EXECUTE'], 'mailroom_app may call it');

DELETE FROM mailroom.cache;
INSERT INTO mailroom.cache (key, value) VALUES
  ('user_roles:1', '1'), ('user_roles:2', '1'), ('userXroles:1', '1'), ('user_roles', '1'),
  ('100%:a', '1'), ('100x:a', '1'), ('1000:a', '1'),
  ('back\slash:1', '1'), ('back\\slash:1', '1'), ('backslash:1', '1'), ('backXslash:1', '1');

SELECT is(mailroom.cache_delete_prefix('user_roles:'), 2::bigint, 'user_roles: removes its two keys');
SELECT ok(EXISTS (SELECT FROM mailroom.cache WHERE key = 'userXroles:1'), '_ is literal: userXroles:1 stays');
SELECT ok(EXISTS (SELECT FROM mailroom.cache WHERE key = 'user_roles'), 'a key shorter than the prefix stays');

SELECT is(mailroom.cache_delete_prefix('100%'), 1::bigint, '% is literal: 100% removes only 100%:a');
SELECT is((SELECT array_agg(key ORDER BY key) FROM mailroom.cache WHERE key LIKE '100%'), ARRAY['1000:a', '100x:a']::text[], '... 100x:a and 1000:a stay');

SELECT is(mailroom.cache_delete_prefix('back\slash'), 1::bigint, '\ is literal: back\slash removes one key');
SELECT is((SELECT array_agg(key ORDER BY key) FROM mailroom.cache WHERE key LIKE 'back%'),
          ARRAY['backXslash:1', 'back\\slash:1', 'backslash:1']::text[], '... back\\slash, backslash and backXslash stay');

SELECT throws_ok($$SELECT mailroom.cache_delete_prefix('')$$, '22023', 'mailroom: prefix: must not be empty', 'an empty prefix (= everything) is refused');
SELECT is((SELECT count(*) FROM mailroom.cache), 7::bigint, 'nothing changed');

SELECT * FROM finish();
ROLLBACK;
