-- pgTAP: the cache_max_entries setting
BEGIN;
SELECT plan(3);

SELECT is(mailroom._setting('cache_max_entries'), '100000', 'the cache cap defaults to 100,000 entries');
SELECT lives_ok($$SELECT mailroom.set_setting('cache_max_entries', '2')$$, 'operators change it with set_setting');

DELETE FROM mailroom.cache;
INSERT INTO mailroom.cache (key, value, accessed_at)
  SELECT 'k' || g, '1', now() - interval '1 hour' + g * interval '1 second' FROM generate_series(1, 5) g;
SELECT results_eq($$SELECT evicted FROM mailroom.cache_sweep(NULL)$$,
  $$VALUES (3::bigint)$$, 'cache_sweep keeps that many');

SELECT * FROM finish();
ROLLBACK;
