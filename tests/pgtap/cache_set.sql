-- pgTAP: mailroom.cache_set
-- No pinned clock (issue 13, item 4): now() stands still inside this
-- transaction, so the stamps are checked against it.
BEGIN;
SELECT plan(22);

SELECT has_function('mailroom', 'cache_set', ARRAY['text', 'jsonb', 'interval'], 'cache_set exists');
SELECT hasnt_function('mailroom', 'cache_set', ARRAY['text', 'jsonb', 'interval', 'timestamp with time zone'], 'cache_set takes no p_now');
SELECT is_definer('mailroom', 'cache_set', ARRAY['text', 'jsonb', 'interval'], 'cache_set is SECURITY DEFINER');
SELECT function_privs_are('mailroom', 'cache_set', ARRAY['text', 'jsonb', 'interval'], 'mailroom_app', ARRAY['EXECUTE'], 'mailroom_app may call it');

DELETE FROM mailroom.cache;
SELECT mailroom.cache_set('k', '{"v": 1}', '5 minutes');
SELECT results_eq($$SELECT value, expires_at, created_at, accessed_at FROM mailroom.cache WHERE key = 'k'$$,
  $$VALUES ('{"v": 1}'::jsonb, now() + interval '5 minutes', now(), now())$$,
  'a ttl sets expires_at = now() + ttl; created and touched now()');
SELECT is(mailroom.cache_get('k'), '{"v": 1}'::jsonb, 'readable before expiry');
UPDATE mailroom.cache SET expires_at = now() WHERE key = 'k';
SELECT is(mailroom.cache_get('k'), NULL, 'a miss at expiry');

SELECT mailroom.cache_set('k', '{"v": 2}', NULL);
SELECT results_eq($$SELECT value, expires_at FROM mailroom.cache WHERE key = 'k'$$,
  $$VALUES ('{"v": 2}'::jsonb, NULL::timestamptz)$$, 'setting again replaces value and expiry; NULL ttl = no expiry');
SELECT is(mailroom.cache_get('k'), '{"v": 2}'::jsonb, 'a NULL ttl never expires');
UPDATE mailroom.cache SET created_at = now() - interval '1 day', accessed_at = now() - interval '1 day' WHERE key = 'k';
SELECT mailroom.cache_set('k', '{"v": 3}');
SELECT results_eq($$SELECT created_at, accessed_at FROM mailroom.cache WHERE key = 'k'$$,
  $$VALUES (now(), now())$$, 'replacing an entry stamps it anew');
SELECT mailroom.cache_set('j', 'null', '1 hour');
SELECT is(mailroom.cache_get('j'), 'null'::jsonb, 'a JSON null can be cached');

SELECT throws_ok($$SELECT mailroom.cache_set('', '1')$$, '22023', 'mailroom: key: must not be empty', 'an empty key is refused');
SELECT throws_ok($$SELECT mailroom.cache_set(NULL, '1')$$, '22023', 'mailroom: key: must not be empty', 'a NULL key is refused');
SELECT throws_ok($$SELECT mailroom.cache_set(repeat('x', 1001), '1')$$, '22023', 'mailroom: key: longer than 1000 bytes (1001 bytes)', 'an over-long key is refused');
SELECT throws_ok($$SELECT mailroom.cache_set('k', NULL)$$, '22023', 'mailroom: value: must not be null', 'a SQL NULL value is refused');
SELECT throws_ok($$SELECT mailroom.cache_set('k', '3', '0 seconds')$$, '22023', 'mailroom: ttl: must be positive or NULL for no expiry (got 00:00:00)', 'a zero ttl is refused');
SELECT throws_ok($$SELECT mailroom.cache_set('k', '3', '-1 minute')$$, '22023', 'mailroom: ttl: must be positive or NULL for no expiry (got -00:01:00)', 'a negative ttl is refused');
SELECT throws_ok($$SELECT mailroom.cache_set('k', '3', '101 years')$$, '22023', 'mailroom: ttl: must be at most 100 years, or NULL for no expiry (got 101 years)', 'a ttl over 100 years is refused');
SELECT throws_ok($$SELECT mailroom.cache_set('k', '3', '100000000 years')$$, '22023', 'mailroom: ttl: must be at most 100 years, or NULL for no expiry (got 100000000 years)', 'a ttl past the timestamp range is refused, not 22008');
SELECT is((SELECT value FROM mailroom.cache WHERE key = 'k'), '{"v": 3}'::jsonb, 'refused calls changed nothing');
SELECT mailroom.cache_set('century', '1', '100 years');
SELECT is((SELECT expires_at FROM mailroom.cache WHERE key = 'century'), now() + interval '100 years', 'a ttl of exactly 100 years is accepted');

SET LOCAL ROLE mailroom_app;
SELECT lives_ok($$SELECT mailroom.cache_set('app', '1', '1 minute')$$, 'mailroom_app can write through the function');
RESET ROLE;

SELECT * FROM finish();
ROLLBACK;
