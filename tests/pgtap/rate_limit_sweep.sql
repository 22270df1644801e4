-- pgTAP: mailroom.rate_limit_sweep
-- No pinned clock (issue 13, item 4): the rows are written around now()
-- through the owner-only cores that take an instant.
BEGIN;
SELECT plan(10);

SELECT has_function('mailroom', 'rate_limit_sweep', ARRAY[]::text[], 'rate_limit_sweep() exists');
SELECT hasnt_function('mailroom', 'rate_limit_sweep', ARRAY['timestamp with time zone'], 'rate_limit_sweep takes no p_now');
SELECT is_definer('mailroom', 'rate_limit_sweep', ARRAY[]::text[], 'rate_limit_sweep is SECURITY DEFINER');
SELECT function_privs_are('mailroom', 'rate_limit_sweep', ARRAY[]::text[], 'mailroom_operator', ARRAY['EXECUTE'], 'mailroom_operator may call it');
SELECT function_privs_are('mailroom', 'rate_limit_sweep', ARRAY[]::text[], 'mailroom_app', ARRAY[]::text[], 'mailroom_app may not');

DELETE FROM mailroom.rate_limits;
-- Fixed windows of a minute are aligned to the epoch: 'old' used one that
-- ended at least an hour ago, 'recent' one that ends within the next minute.
SELECT mailroom._rate_limit('old', 5, '1 minute', now() - interval '1 hour');
SELECT mailroom.rate_limit('recent', 5, '1 minute');
-- A sliding grant 90 s ago stops counting about 31 s ago: one window of grace is left.
SELECT mailroom._rate_sliding_take('slide', 1, 5, '1 minute', now() - interval '90 seconds');
SELECT is(mailroom.rate_limit_sweep(), 1::bigint, 'only rows without state (after a window of grace) go');
SELECT is((SELECT array_agg(key ORDER BY key) FROM mailroom.rate_limits), ARRAY['recent', 'slide']::text[], 'live rows stay');
UPDATE mailroom.rate_limits SET expires_at = now() - window_length - interval '1 microsecond' WHERE key = 'slide';
SELECT is(mailroom.rate_limit_sweep(), 1::bigint, 'a row goes once its window of grace has passed by now()');

-- Domain budgets: a row whose windows emptied over a minute ago goes.
DELETE FROM mailroom.domain_budgets;
SELECT count(*) FROM mailroom._domain_budgets_spend('{old.test}', '{5}', '{50}', now() - interval '3 minutes');
SELECT count(*) FROM mailroom._domain_budgets_spend('{recent.test}', '{5}', '{50}', now() - interval '30 seconds');
SELECT is(mailroom.rate_limit_sweep(), 1::bigint, 'a domain budget empty for over a minute goes');
SELECT is((SELECT array_agg(domain::text) FROM mailroom.domain_budgets), ARRAY['recent.test'], 'a live one stays');

SELECT * FROM finish();
ROLLBACK;
