-- pgTAP: mailroom.rate_limit_sweep
BEGIN;
SELECT plan(5);

SELECT has_function('mailroom', 'rate_limit_sweep', ARRAY['timestamp with time zone'], 'rate_limit_sweep exists');
SELECT is_definer('mailroom', 'rate_limit_sweep', ARRAY['timestamp with time zone'], 'rate_limit_sweep is SECURITY DEFINER');
SELECT function_privs_are('mailroom', 'rate_limit_sweep', ARRAY['timestamp with time zone'], 'mailroom_operator', ARRAY['EXECUTE'], 'mailroom_operator may call it');

DELETE FROM mailroom.rate_limits;
SELECT mailroom.rate_limit('old', 5, '1 minute', '2026-06-01 11:00:10+00');
SELECT mailroom.rate_limit('recent', 5, '1 minute', '2026-06-01 11:59:10+00');
SELECT mailroom.rate_limit_sliding('slide', 5, '1 minute', '2026-06-01 11:58:30+00');
-- 'old' ended 11:01 (+ one window of grace), 'recent' ends 12:00, 'slide' ends about 11:59:31.
SELECT is(mailroom.rate_limit_sweep('2026-06-01 12:00:00+00'), 1::bigint, 'only rows without state (after a window of grace) go');
SELECT is((SELECT array_agg(key ORDER BY key) FROM mailroom.rate_limits), ARRAY['recent', 'slide']::text[], 'live rows stay');

SELECT * FROM finish();
ROLLBACK;
