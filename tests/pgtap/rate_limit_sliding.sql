-- pgTAP: mailroom.rate_limit_sliding and its core, _rate_sliding_take
BEGIN;
SELECT plan(21);

SELECT has_function('mailroom', 'rate_limit_sliding', ARRAY['text', 'integer', 'interval', 'timestamp with time zone'], 'rate_limit_sliding exists');
SELECT is_definer('mailroom', 'rate_limit_sliding', ARRAY['text', 'integer', 'interval', 'timestamp with time zone'], 'rate_limit_sliding is SECURITY DEFINER');
SELECT function_privs_are('mailroom', 'rate_limit_sliding', ARRAY['text', 'integer', 'interval', 'timestamp with time zone'], 'mailroom_app', ARRAY['EXECUTE'], 'mailroom_app may call it');
SELECT function_privs_are('mailroom', '_rate_sliding_take', ARRAY['text', 'integer', 'integer', 'interval', 'timestamp with time zone'], 'mailroom_app', ARRAY[]::text[], '_rate_sliding_take is internal');

DELETE FROM mailroom.rate_limits;
-- limit 2 per 1 s: slots are 20 ms long.
SELECT results_eq($$SELECT * FROM mailroom.rate_limit_sliding('s', 2, '1 second', '2026-06-01 12:00:00.50+00')$$,
  $$VALUES (true, 1, interval '0')$$, 'first hit allowed');
SELECT results_eq($$SELECT * FROM mailroom.rate_limit_sliding('s', 2, '1 second', '2026-06-01 12:00:00.95+00')$$,
  $$VALUES (true, 0, interval '0')$$, 'second hit allowed');
SELECT results_eq($$SELECT * FROM mailroom.rate_limit_sliding('s', 2, '1 second', '2026-06-01 12:00:01.10+00')$$,
  $$VALUES (false, 0, interval '0.42 seconds')$$,
  'across the boundary of an aligned second the span 0.50..1.10 already holds 2: denied (a fixed window would allow it), retry once 0.50 has slid out');
SELECT results_eq($$SELECT allowed FROM mailroom.rate_limit_sliding('s', 2, '1 second', '2026-06-01 12:00:01.51+00')$$,
  $$VALUES (false)$$, 'still denied within the slot margin (conservative, never generous)');
SELECT results_eq($$SELECT * FROM mailroom.rate_limit_sliding('s', 2, '1 second', '2026-06-01 12:00:01.52+00')$$,
  $$VALUES (true, 0, interval '0')$$, 'allowed once the first hit is a full window (plus its slot) old');
SELECT results_eq($$SELECT allowed, remaining FROM mailroom.rate_limit_sliding('s', 2, '1 second', '2026-06-01 12:00:01.90+00')$$,
  $$VALUES (false, 0)$$, 'the hits of 0.95 and 1.52 fill the window again');
SELECT results_eq($$SELECT allowed FROM mailroom.rate_limit_sliding('s', 2, '1 second', '2026-06-01 12:00:01.00+00')$$,
  $$VALUES (false)$$, 'a late call (p_now before the newest grant) is judged against the grants around it');
SELECT is((SELECT hits FROM mailroom.rate_limits WHERE key = 's'), 2, 'denied calls record nothing');
SELECT results_eq($$SELECT allowed FROM mailroom.rate_limit_sliding('s', 2, '1 second', '2026-06-01 11:59:58+00')$$,
  $$VALUES (false)$$, 'a call more than a window older than the newest grant is denied');
SELECT results_eq($$SELECT * FROM mailroom.rate_limit_sliding('s', 2, '1 second', '2026-06-01 12:10:00+00')$$,
  $$VALUES (true, 1, interval '0')$$, 'long after, the key starts fresh');
SELECT is((SELECT cardinality(slots) FROM mailroom.rate_limits WHERE key = 's'), 1, 'old slots were pruned');

-- The internal take: several at once, look only, refunds.
SELECT results_eq($$SELECT granted, remaining FROM mailroom._rate_sliding_take('t', 30, 50, '1 second', '2026-06-01 12:00:00+00')$$,
  $$VALUES (30, 20)$$, 'take 30 of 50');
SELECT results_eq($$SELECT granted, remaining, retry_after FROM mailroom._rate_sliding_take('t', 30, 50, '1 second', '2026-06-01 12:00:00.5+00')$$,
  $$VALUES (20, 0, interval '0.52 seconds')$$, 'asking 30 more grants the 20 left');
SELECT results_eq($$SELECT granted, remaining FROM mailroom._rate_sliding_take('t', -5, 50, '1 second', '2026-06-01 12:00:00.5+00')$$,
  $$VALUES (-5, 5)$$, 'a refund in the same slot gives 5 back');
SELECT results_eq($$SELECT granted, remaining FROM mailroom._rate_sliding_take('t', 0, 50, '1 second', '2026-06-01 12:00:00.6+00')$$,
  $$VALUES (0, 5)$$, 'want 0 only looks');

SELECT throws_ok($$SELECT * FROM mailroom.rate_limit_sliding('k', -1, '1 s')$$, '22023', 'mailroom: limit: must be at least 1 (got -1)', 'a negative limit is refused');
SELECT is((SELECT count(*) FROM mailroom.rate_limits WHERE key = 'k'), 0::bigint, 'nothing was stored');

SELECT * FROM finish();
ROLLBACK;
