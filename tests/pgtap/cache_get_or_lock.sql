-- pgTAP: mailroom.cache_get_or_lock and mailroom.cache_unlock
-- (waiting for another session's lock is tested in tests/test_cache.py)
BEGIN;
SELECT plan(20);

SELECT has_function('mailroom', 'cache_get_or_lock', ARRAY['text', 'interval'], 'cache_get_or_lock exists');
SELECT hasnt_function('mailroom', 'cache_get_or_lock', ARRAY['text', 'interval', 'timestamp with time zone'], 'cache_get_or_lock takes no p_now');
SELECT is_definer('mailroom', 'cache_get_or_lock', ARRAY['text', 'interval'], 'cache_get_or_lock is SECURITY DEFINER');
SELECT function_privs_are('mailroom', 'cache_get_or_lock', ARRAY['text', 'interval'], 'mailroom_app', ARRAY['EXECUTE'], 'mailroom_app may call cache_get_or_lock');
SELECT has_function('mailroom', 'cache_unlock', ARRAY['text'], 'cache_unlock exists');
SELECT is_definer('mailroom', 'cache_unlock', ARRAY['text'], 'cache_unlock is SECURITY DEFINER');
SELECT function_privs_are('mailroom', 'cache_unlock', ARRAY['text'], 'mailroom_app', ARRAY['EXECUTE'], 'mailroom_app may call cache_unlock');

CREATE TEMP VIEW my_load_locks AS
  SELECT count(*) AS n FROM mailroom.cache_loads WHERE pid = pg_backend_pid();

DELETE FROM mailroom.cache;
SELECT mailroom.cache_set('present', '{"x": 1}', '1 hour');

SELECT results_eq($$SELECT hit, value, locked FROM mailroom.cache_get_or_lock('present', '0')$$,
  $$VALUES (true, '{"x": 1}'::jsonb, false)$$, 'a hit returns the value and takes no lock');
SELECT is((SELECT n FROM my_load_locks), 0::bigint, '... no load lock is held');

SELECT results_eq($$SELECT hit, value, locked FROM mailroom.cache_get_or_lock('absent', '0')$$,
  $$VALUES (false, NULL::jsonb, true)$$, 'a miss hands this session the load lock');
SELECT is((SELECT n FROM my_load_locks), 1::bigint, '... a load row naming this backend is held (no advisory lock anyone could take)');
SELECT mailroom.cache_set('absent', '"loaded"', '1 hour');
SELECT is(mailroom.cache_unlock('absent'), true, 'cache_unlock releases it');
SELECT is((SELECT n FROM my_load_locks), 0::bigint, '... and it is gone');
SELECT is(mailroom.cache_unlock('absent'), false, 'cache_unlock without the lock says false (and does not warn)');
SELECT results_eq($$SELECT hit, value, locked FROM mailroom.cache_get_or_lock('absent', '1 second')$$,
  $$VALUES (true, '"loaded"'::jsonb, false)$$, 'after the load the next caller gets the stored value');

SELECT mailroom.cache_set('expired', '1', '1 minute');
UPDATE mailroom.cache SET expires_at = now() WHERE key = 'expired';
SELECT results_eq($$SELECT hit, locked FROM mailroom.cache_get_or_lock('expired', '0')$$,
  $$VALUES (false, true)$$, 'an expired entry is a miss: the caller must load');
SELECT mailroom.cache_unlock('expired');

SELECT throws_ok($$SELECT * FROM mailroom.cache_get_or_lock(NULL)$$, '22023', 'mailroom: key: must not be null', 'a NULL key is refused');
SELECT throws_ok($$SELECT * FROM mailroom.cache_get_or_lock('k', '-1 second')$$, '22023', 'mailroom: wait: must be zero or positive (got -00:00:01)', 'a negative wait is refused');
SELECT throws_ok($$SELECT * FROM mailroom.cache_get_or_lock('k', NULL)$$, '22023', 'mailroom: wait: must be zero or positive (got NULL)', 'a NULL wait is refused');
SELECT is((SELECT n FROM my_load_locks), 0::bigint, 'refused calls took no lock');

SELECT * FROM finish();
ROLLBACK;
