-- pgTAP: mailroom.cache_get
-- No pinned clock (issue 13, item 4): now() stands still inside this
-- transaction, so the rows are placed around it.
BEGIN;
SELECT plan(18);

SELECT has_function('mailroom', 'cache_get', ARRAY['text'], 'cache_get(text) exists');
SELECT hasnt_function('mailroom', 'cache_get', ARRAY['text', 'timestamp with time zone'], 'cache_get takes no p_now');
SELECT is_definer('mailroom', 'cache_get', ARRAY['text'], 'cache_get is SECURITY DEFINER');
SELECT function_privs_are('mailroom', 'cache_get', ARRAY['text'], 'mailroom_app', ARRAY['EXECUTE'], 'mailroom_app may call it');
SELECT function_privs_are('mailroom', 'cache_get', ARRAY['text'], 'mailroom_runner', ARRAY[]::text[], 'mailroom_runner may not');

DELETE FROM mailroom.cache;
INSERT INTO mailroom.cache (key, value, expires_at, created_at, accessed_at) VALUES
  ('fresh',   '{"a": 1}', now() + interval '1 microsecond', now() - interval '1 hour', now() - interval '30 seconds'),
  ('edge',    '{"a": 2}', now(),                            now() - interval '1 hour', now() - interval '30 seconds'),
  ('forever', '[1, 2]',   NULL,                             now() - interval '1 hour', now() - interval '1 hour'),
  ('jnull',   'null',     NULL,                             now() - interval '1 hour', now() - interval '1 hour'),
  ('lru',     'true',     NULL,                             now() - interval '1 hour', now() - interval '1 hour'),
  ('minute',  'true',     NULL,                             now() - interval '1 hour', now() - interval '1 minute'),
  ('stale',   '"old"',    now() - interval '30 minutes',    now() - interval '1 hour', now() - interval '1 hour');

SELECT is(mailroom.cache_get('fresh'), '{"a": 1}'::jsonb, 'a live entry is a hit');
SELECT is(mailroom.cache_get('edge'), NULL, 'an entry is a miss from its expires_at on');
SELECT is(mailroom.cache_get('stale'), NULL, 'an expired entry is a miss although no sweep ran');
SELECT is((SELECT count(*) FROM mailroom.cache WHERE key = 'stale'), 1::bigint, '... and the read did not need to delete it');
SELECT is(mailroom.cache_get('forever'), '[1, 2]'::jsonb, 'no expires_at = never expires');
SELECT is(mailroom.cache_get('nope'), NULL, 'a missing key is NULL');
SELECT is(mailroom.cache_get('jnull'), 'null'::jsonb, 'a stored JSON null is not a miss');

-- LRU touch: at most once a minute.
SELECT is((SELECT accessed_at FROM mailroom.cache WHERE key = 'fresh'), now() - interval '30 seconds',
          'a hit within a minute of the last touch writes nothing');
SELECT mailroom.cache_get('minute');
SELECT is((SELECT accessed_at FROM mailroom.cache WHERE key = 'minute'), now() - interval '1 minute',
          'nor does a hit exactly a minute after it');
SELECT mailroom.cache_get('lru');
SELECT is((SELECT accessed_at FROM mailroom.cache WHERE key = 'lru'), now(),
          'a hit more than a minute after the last touch refreshes accessed_at to now()');

SELECT throws_ok($$SELECT mailroom.cache_get(NULL)$$, '22023', 'mailroom: key: must not be null', 'a NULL key is refused');

SET LOCAL ROLE mailroom_app;
SELECT is(mailroom.cache_get('forever'), '[1, 2]'::jsonb, 'mailroom_app can read through the function');
SELECT throws_ok($$SELECT * FROM mailroom.cache$$, '42501', NULL, 'mailroom_app cannot read the table directly');
RESET ROLE;

SELECT * FROM finish();
ROLLBACK;
