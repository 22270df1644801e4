-- pgTAP: mailroom.cache_sweep
-- No pinned clock (issue 13, item 4): the entries are placed around now().
BEGIN;
SELECT plan(13);

SELECT has_function('mailroom', 'cache_sweep', ARRAY['bigint'], 'cache_sweep(bigint) exists');
SELECT hasnt_function('mailroom', 'cache_sweep', ARRAY['bigint', 'timestamp with time zone'], 'cache_sweep takes no p_now');
SELECT is_definer('mailroom', 'cache_sweep', ARRAY['bigint'], 'cache_sweep is SECURITY DEFINER');
SELECT function_privs_are('mailroom', 'cache_sweep', ARRAY['bigint'], 'mailroom_operator', ARRAY['EXECUTE'], 'mailroom_operator may call it');
SELECT function_privs_are('mailroom', 'cache_sweep', ARRAY['bigint'], 'mailroom_app', ARRAY[]::text[], 'mailroom_app may not');

DELETE FROM mailroom.cache;
INSERT INTO mailroom.cache (key, value, expires_at, accessed_at) VALUES
  ('gone1', '1', now() - interval '1 hour',          now() - interval '2 hours'),
  ('gone2', '1', now(),                              now() - interval '2 hours'),
  ('old',   '1', NULL,                               now() - interval '3 hours'),
  ('mid',   '1', now() + interval '1 microsecond',   now() - interval '90 minutes'),
  ('new',   '1', NULL,                               now() - interval '30 minutes'),
  ('newer', '1', NULL,                               now() - interval '15 minutes');

SELECT results_eq($$SELECT expired, evicted FROM mailroom.cache_sweep(10)$$,
  $$VALUES (2::bigint, 0::bigint)$$, 'under the cap: only entries expired by now() go (expires_at = now() counts)');
SELECT ok(EXISTS (SELECT FROM mailroom.cache WHERE key = 'mid'), 'an entry expiring just after now() stays');
SELECT results_eq($$SELECT expired, evicted FROM mailroom.cache_sweep(2)$$,
  $$VALUES (0::bigint, 2::bigint)$$, 'over the cap: the excess is evicted');
SELECT is((SELECT array_agg(key ORDER BY key) FROM mailroom.cache), ARRAY['new', 'newer']::text[],
  'the least recently used entries went, the most recently used stayed');

SELECT mailroom.set_setting('cache_max_entries', '1');
SELECT results_eq($$SELECT expired, evicted FROM mailroom.cache_sweep(NULL)$$,
  $$VALUES (0::bigint, 1::bigint)$$, 'without p_max_entries the cap comes from the setting cache_max_entries');
SELECT is((SELECT array_agg(key) FROM mailroom.cache), ARRAY['newer']::text[], 'the newest entry stayed');

SELECT throws_ok($$SELECT * FROM mailroom.cache_sweep(-1)$$, '22023', 'mailroom: max_entries: must not be negative (got -1)', 'a negative cap is refused');
SELECT is((SELECT count(*) FROM mailroom.cache), 1::bigint, 'nothing changed');

SELECT * FROM finish();
ROLLBACK;
