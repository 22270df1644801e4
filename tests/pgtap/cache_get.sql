-- pgTAP: mailroom.cache_get
BEGIN;
SELECT plan(16);

SELECT has_function('mailroom', 'cache_get', ARRAY['text', 'timestamp with time zone'], 'cache_get(text, timestamptz) exists');
SELECT is_definer('mailroom', 'cache_get', ARRAY['text', 'timestamp with time zone'], 'cache_get is SECURITY DEFINER');
SELECT function_privs_are('mailroom', 'cache_get', ARRAY['text', 'timestamp with time zone'], 'mailroom_app', ARRAY['EXECUTE'], 'mailroom_app may call it');
SELECT function_privs_are('mailroom', 'cache_get', ARRAY['text', 'timestamp with time zone'], 'mailroom_runner', ARRAY[]::text[], 'mailroom_runner may not');

DELETE FROM mailroom.cache;
INSERT INTO mailroom.cache (key, value, expires_at, created_at, accessed_at) VALUES
  ('fresh',   '{"a": 1}', '2026-06-01 12:00:00+00', '2026-06-01 11:00:00+00', '2026-06-01 11:59:30+00'),
  ('forever', '[1, 2]',   NULL,                     '2026-06-01 11:00:00+00', '2026-06-01 11:00:00+00'),
  ('jnull',   'null',     NULL,                     '2026-06-01 11:00:00+00', '2026-06-01 11:00:00+00'),
  ('lru',     'true',     NULL,                     '2026-06-01 11:00:00+00', '2026-06-01 11:00:00+00'),
  ('stale',   '"old"',    '2026-06-01 11:30:00+00', '2026-06-01 11:00:00+00', '2026-06-01 11:00:00+00');

SELECT is(mailroom.cache_get('fresh', '2026-06-01 11:59:59+00'), '{"a": 1}'::jsonb, 'a live entry is a hit');
SELECT is(mailroom.cache_get('fresh', '2026-06-01 12:00:00+00'), NULL, 'an entry is a miss from its expires_at on');
SELECT is(mailroom.cache_get('stale', '2026-06-01 12:00:00+00'), NULL, 'an expired entry is a miss although no sweep ran');
SELECT is((SELECT count(*) FROM mailroom.cache WHERE key = 'stale'), 1::bigint, '... and the read did not need to delete it');
SELECT is(mailroom.cache_get('forever', '2999-01-01 00:00:00+00'), '[1, 2]'::jsonb, 'no expires_at = never expires');
SELECT is(mailroom.cache_get('nope', '2026-06-01 12:00:00+00'), NULL, 'a missing key is NULL');
SELECT is(mailroom.cache_get('jnull', '2026-06-01 12:00:00+00'), 'null'::jsonb, 'a stored JSON null is not a miss');

-- LRU touch: at most once a minute.
SELECT mailroom.cache_get('fresh', '2026-06-01 11:59:50+00');
SELECT is((SELECT accessed_at FROM mailroom.cache WHERE key = 'fresh'), '2026-06-01 11:59:30+00'::timestamptz,
          'a hit within a minute of the last touch writes nothing');
SELECT mailroom.cache_get('lru', '2026-06-01 12:00:00+00');
SELECT is((SELECT accessed_at FROM mailroom.cache WHERE key = 'lru'), '2026-06-01 12:00:00+00'::timestamptz,
          'a hit more than a minute after the last touch refreshes accessed_at');

SELECT throws_ok($$SELECT mailroom.cache_get(NULL)$$, '22023', 'mailroom: key: must not be null', 'a NULL key is refused');

SET LOCAL ROLE mailroom_app;
SELECT is(mailroom.cache_get('forever', '2026-06-01 12:00:00+00'), '[1, 2]'::jsonb, 'mailroom_app can read through the function');
SELECT throws_ok($$SELECT * FROM mailroom.cache$$, '42501', NULL, 'mailroom_app cannot read the table directly');
RESET ROLE;

SELECT * FROM finish();
ROLLBACK;
