-- pgTAP: mailroom.rate_limit_sliding and its core, _rate_sliding_take
-- rate_limit_sliding judges by now() (issue 13, item 4). It is the argument
-- check plus one _rate_sliding_take(key, 1, limit, window, now()), so the
-- sliding window is walked below through _rate_sliding_take on a pinned clock
-- (granted = 1 is rate_limit_sliding's allowed), and rate_limit_sliding itself
-- is called at now().
BEGIN;
SELECT plan(28);

SELECT has_function('mailroom', 'rate_limit_sliding', ARRAY['text', 'integer', 'interval'], 'rate_limit_sliding exists');
SELECT hasnt_function('mailroom', 'rate_limit_sliding', ARRAY['text', 'integer', 'interval', 'timestamp with time zone'], 'rate_limit_sliding takes no p_now');
SELECT is_definer('mailroom', 'rate_limit_sliding', ARRAY['text', 'integer', 'interval'], 'rate_limit_sliding is SECURITY DEFINER');
SELECT function_privs_are('mailroom', 'rate_limit_sliding', ARRAY['text', 'integer', 'interval'], 'mailroom_app', ARRAY['EXECUTE'], 'mailroom_app may call it');
SELECT function_privs_are('mailroom', '_rate_sliding_take', ARRAY['text', 'integer', 'integer', 'interval', 'timestamp with time zone'], 'mailroom_app', ARRAY[]::text[], '_rate_sliding_take is internal');
SELECT is((SELECT prosrc ~ 'mailroom\._rate_sliding_take\(p_key, 1, p_limit, p_window, now\(\)\)' FROM pg_proc
            WHERE oid = 'mailroom.rate_limit_sliding(text, integer, interval)'::regprocedure), true,
          'rate_limit_sliding takes one hit from _rate_sliding_take at now()');

DELETE FROM mailroom.rate_limits;
-- limit 2 per 1 s: slots are 20 ms long.
SELECT results_eq($$SELECT granted = 1 AS allowed, remaining, retry_after FROM mailroom._rate_sliding_take('s', 1, 2, '1 second', '2026-06-01 12:00:00.50+00')$$,
  $$VALUES (true, 1, interval '0')$$, 'first hit allowed');
SELECT results_eq($$SELECT granted = 1 AS allowed, remaining, retry_after FROM mailroom._rate_sliding_take('s', 1, 2, '1 second', '2026-06-01 12:00:00.95+00')$$,
  $$VALUES (true, 0, interval '0')$$, 'second hit allowed');
SELECT results_eq($$SELECT granted = 1 AS allowed, remaining, retry_after FROM mailroom._rate_sliding_take('s', 1, 2, '1 second', '2026-06-01 12:00:01.10+00')$$,
  $$VALUES (false, 0, interval '0.42 seconds')$$,
  'across the boundary of an aligned second the span 0.50..1.10 already holds 2: denied (a fixed window would allow it), retry once 0.50 has slid out');
SELECT results_eq($$SELECT granted = 1 AS allowed FROM mailroom._rate_sliding_take('s', 1, 2, '1 second', '2026-06-01 12:00:01.51+00')$$,
  $$VALUES (false)$$, 'still denied within the slot margin (conservative, never generous)');
SELECT results_eq($$SELECT granted = 1 AS allowed, remaining, retry_after FROM mailroom._rate_sliding_take('s', 1, 2, '1 second', '2026-06-01 12:00:01.52+00')$$,
  $$VALUES (true, 0, interval '0')$$, 'allowed once the first hit is a full window (plus its slot) old');
SELECT results_eq($$SELECT granted = 1 AS allowed, remaining FROM mailroom._rate_sliding_take('s', 1, 2, '1 second', '2026-06-01 12:00:01.90+00')$$,
  $$VALUES (false, 0)$$, 'the hits of 0.95 and 1.52 fill the window again');
SELECT results_eq($$SELECT granted = 1 AS allowed FROM mailroom._rate_sliding_take('s', 1, 2, '1 second', '2026-06-01 12:00:01.00+00')$$,
  $$VALUES (false)$$, 'a late call (p_now before the newest grant) is judged against the grants around it');
SELECT is((SELECT hits FROM mailroom.rate_limits WHERE key = 's'), 2, 'denied calls record nothing');
SELECT results_eq($$SELECT granted = 1 AS allowed FROM mailroom._rate_sliding_take('s', 1, 2, '1 second', '2026-06-01 11:59:58+00')$$,
  $$VALUES (false)$$, 'a call more than a window older than the newest grant is denied');
SELECT results_eq($$SELECT granted = 1 AS allowed, remaining, retry_after FROM mailroom._rate_sliding_take('s', 1, 2, '1 second', '2026-06-01 12:10:00+00')$$,
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

-- rate_limit_sliding itself, at now().
SELECT results_eq($$SELECT * FROM mailroom.rate_limit_sliding('now', 1, '1 minute')$$,
  $$VALUES (true, 0, interval '0')$$, 'rate_limit_sliding allows a hit at now()');
SELECT results_eq($$SELECT allowed, remaining, retry_after > interval '0' AND retry_after <= interval '1 minute 1.2 seconds'
                      FROM mailroom.rate_limit_sliding('now', 1, '1 minute')$$,
  $$VALUES (false, 0, true)$$, 'a second one is denied, with a retry_after within a window and a slot');
SELECT is((SELECT hits FROM mailroom.rate_limits WHERE key = 'now'), 1, '... and recorded nothing');
SET LOCAL ROLE mailroom_app;
SELECT results_eq($$SELECT allowed FROM mailroom.rate_limit_sliding('app', 1, '1 minute')$$, $$VALUES (true)$$,
  'mailroom_app counts hits through rate_limit_sliding');
SELECT throws_ok($$SELECT * FROM mailroom._rate_sliding_take('app', 1, 1, '1 minute', '2100-01-01Z')$$, '42501',
  'permission denied for function _rate_sliding_take', 'mailroom_app cannot pick the clock');
RESET ROLE;

SELECT throws_ok($$SELECT * FROM mailroom.rate_limit_sliding('k', -1, '1 s')$$, '22023', 'mailroom: limit: must be at least 1 (got -1)', 'a negative limit is refused');
SELECT is((SELECT count(*) FROM mailroom.rate_limits WHERE key = 'k'), 0::bigint, 'nothing was stored');

SELECT * FROM finish();
ROLLBACK;
