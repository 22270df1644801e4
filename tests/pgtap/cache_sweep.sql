-- pgTAP: mailroom.cache_sweep
BEGIN;
SELECT plan(11);

SELECT has_function('mailroom', 'cache_sweep', ARRAY['bigint', 'timestamp with time zone'], 'cache_sweep(bigint, timestamptz) exists');
SELECT is_definer('mailroom', 'cache_sweep', ARRAY['bigint', 'timestamp with time zone'], 'cache_sweep is SECURITY DEFINER');
SELECT function_privs_are('mailroom', 'cache_sweep', ARRAY['bigint', 'timestamp with time zone'], 'mailroom_operator', ARRAY['EXECUTE'], 'mailroom_operator may call it');
SELECT function_privs_are('mailroom', 'cache_sweep', ARRAY['bigint', 'timestamp with time zone'], 'mailroom_app', ARRAY[]::text[], 'mailroom_app may not');

DELETE FROM mailroom.cache;
INSERT INTO mailroom.cache (key, value, expires_at, accessed_at) VALUES
  ('gone1', '1', '2026-06-01 11:00:00+00', '2026-06-01 10:00:00+00'),
  ('gone2', '1', '2026-06-01 12:00:00+00', '2026-06-01 10:00:00+00'),
  ('old',   '1', NULL,                     '2026-06-01 09:00:00+00'),
  ('mid',   '1', '2026-06-01 13:00:00+00', '2026-06-01 10:30:00+00'),
  ('new',   '1', NULL,                     '2026-06-01 11:30:00+00'),
  ('newer', '1', NULL,                     '2026-06-01 11:45:00+00');

SELECT results_eq($$SELECT expired, evicted FROM mailroom.cache_sweep(10, '2026-06-01 12:00:00+00')$$,
  $$VALUES (2::bigint, 0::bigint)$$, 'under the cap: only entries expired at p_now go (expires_at = now counts)');
SELECT results_eq($$SELECT expired, evicted FROM mailroom.cache_sweep(2, '2026-06-01 12:00:00+00')$$,
  $$VALUES (0::bigint, 2::bigint)$$, 'over the cap: the excess is evicted');
SELECT is((SELECT array_agg(key ORDER BY key) FROM mailroom.cache), ARRAY['new', 'newer']::text[],
  'the least recently used entries went, the most recently used stayed');

SELECT mailroom.set_setting('cache_max_entries', '1');
SELECT results_eq($$SELECT expired, evicted FROM mailroom.cache_sweep(NULL, '2026-06-01 12:00:00+00')$$,
  $$VALUES (0::bigint, 1::bigint)$$, 'without p_max_entries the cap comes from the setting cache_max_entries');
SELECT is((SELECT array_agg(key) FROM mailroom.cache), ARRAY['newer']::text[], 'the newest entry stayed');

SELECT throws_ok($$SELECT * FROM mailroom.cache_sweep(-1)$$, '22023', 'mailroom: max_entries: must not be negative (got -1)', 'a negative cap is refused');
SELECT is((SELECT count(*) FROM mailroom.cache), 1::bigint, 'nothing changed');

SELECT * FROM finish();
ROLLBACK;
