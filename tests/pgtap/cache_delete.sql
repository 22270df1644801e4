-- pgTAP: mailroom.cache_delete
BEGIN;
SELECT plan(8);

SELECT has_function('mailroom', 'cache_delete', ARRAY['text'], 'cache_delete(text) exists');
SELECT is_definer('mailroom', 'cache_delete', ARRAY['text'], 'cache_delete is SECURITY DEFINER');
SELECT function_privs_are('mailroom', 'cache_delete', ARRAY['text'], 'mailroom_app', ARRAY['EXECUTE'], 'mailroom_app may call it');

DELETE FROM mailroom.cache;
SELECT mailroom.cache_set('a', '1');
SELECT mailroom.cache_set('ab', '2');
SELECT is(mailroom.cache_delete('a'), true, 'deleting a present key says true');
SELECT is(mailroom.cache_delete('a'), false, 'deleting it again says false');
SELECT is((SELECT array_agg(key) FROM mailroom.cache), ARRAY['ab']::text[], 'only that key went');

SELECT throws_ok($$SELECT mailroom.cache_delete(NULL)$$, '22023', 'mailroom: key: must not be null', 'a NULL key is refused');
SELECT is((SELECT count(*) FROM mailroom.cache), 1::bigint, 'nothing changed');

SELECT * FROM finish();
ROLLBACK;
