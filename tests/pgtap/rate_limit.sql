-- pgTAP: mailroom.rate_limit (fixed window) and its owner-only twin _rate_limit
-- rate_limit judges by now(); _rate_limit is the same body on a pinned clock
-- (issue 13, item 4), so the windows below are walked through the twin, and
-- the two bodies are compared so that what the twin shows holds for rate_limit.
BEGIN;
SELECT plan(39);

SELECT has_function('mailroom', 'rate_limit', ARRAY['text', 'integer', 'interval'], 'rate_limit exists');
SELECT hasnt_function('mailroom', 'rate_limit', ARRAY['text', 'integer', 'interval', 'timestamp with time zone'], 'rate_limit takes no p_now');
SELECT is_definer('mailroom', 'rate_limit', ARRAY['text', 'integer', 'interval'], 'rate_limit is SECURITY DEFINER');
SELECT function_privs_are('mailroom', 'rate_limit', ARRAY['text', 'integer', 'interval'], 'mailroom_app', ARRAY['EXECUTE'], 'mailroom_app may call it');
SELECT function_privs_are('mailroom', 'rate_limit', ARRAY['text', 'integer', 'interval'], 'mailroom_runner', ARRAY[]::text[], 'mailroom_runner may not');
SELECT has_function('mailroom', '_rate_limit', ARRAY['text', 'integer', 'interval', 'timestamp with time zone'], 'the twin _rate_limit(..., p_now) exists');
SELECT is_definer('mailroom', '_rate_limit', ARRAY['text', 'integer', 'interval', 'timestamp with time zone'], '_rate_limit is SECURITY DEFINER');
SELECT function_privs_are('mailroom', '_rate_limit', ARRAY['text', 'integer', 'interval', 'timestamp with time zone'], 'mailroom_app', ARRAY[]::text[], 'mailroom_app may not call the twin');
SELECT function_privs_are('mailroom', '_rate_limit', ARRAY['text', 'integer', 'interval', 'timestamp with time zone'], 'public', ARRAY[]::text[], 'nor may PUBLIC');
SELECT is((SELECT replace(prosrc, 'p_now', 'now()') FROM pg_proc WHERE oid = 'mailroom._rate_limit(text, integer, interval, timestamptz)'::regprocedure),
          (SELECT prosrc FROM pg_proc WHERE oid = 'mailroom.rate_limit(text, integer, interval)'::regprocedure),
          'rate_limit is the twin''s body with now() for p_now, character for character');
SELECT is((SELECT row(prosecdef, proconfig, provolatile, proretset, prorettype) FROM pg_proc WHERE oid = 'mailroom._rate_limit(text, integer, interval, timestamptz)'::regprocedure)::text,
          (SELECT row(prosecdef, proconfig, provolatile, proretset, prorettype) FROM pg_proc WHERE oid = 'mailroom.rate_limit(text, integer, interval)'::regprocedure)::text,
          '... with the same security, search_path, volatility and result');

DELETE FROM mailroom.rate_limits;
SELECT results_eq($$SELECT * FROM mailroom._rate_limit('login:1', 3, '10 seconds', '2026-06-01 12:00:01+00')$$,
  $$VALUES (true, 2, interval '0')$$, 'first hit: allowed, 2 remaining');
SELECT results_eq($$SELECT * FROM mailroom._rate_limit('login:1', 3, '10 seconds', '2026-06-01 12:00:02+00')$$,
  $$VALUES (true, 1, interval '0')$$, 'second hit: allowed, 1 remaining');
SELECT results_eq($$SELECT * FROM mailroom._rate_limit('login:1', 3, '10 seconds', '2026-06-01 12:00:09.5+00')$$,
  $$VALUES (true, 0, interval '0')$$, 'third hit: allowed, 0 remaining');
SELECT results_eq($$SELECT * FROM mailroom._rate_limit('login:1', 3, '10 seconds', '2026-06-01 12:00:09.75+00')$$,
  $$VALUES (false, 0, interval '0.25 seconds')$$, 'fourth hit: denied, retry when the window ends');
SELECT results_eq($$SELECT * FROM mailroom._rate_limit('login:1', 3, '10 seconds', '2026-06-01 12:00:09.8+00')$$,
  $$VALUES (false, 0, interval '0.2 seconds')$$, 'still denied');
SELECT is((SELECT hits FROM mailroom.rate_limits WHERE key = 'login:1'), 4, 'denied hits stop counting at limit + 1');
SELECT results_eq($$SELECT * FROM mailroom._rate_limit('login:2', 3, '10 seconds', '2026-06-01 12:00:09.8+00')$$,
  $$VALUES (true, 2, interval '0')$$, 'keys are independent');
SELECT results_eq($$SELECT * FROM mailroom._rate_limit('login:1', 3, '10 seconds', '2026-06-01 12:00:10+00')$$,
  $$VALUES (true, 2, interval '0')$$, 'a new window (aligned to the epoch) starts a new count');
SELECT results_eq($$SELECT * FROM mailroom._rate_limit('login:1', 3, '10 seconds', '2026-06-01 12:00:09.9+00')$$,
  $$VALUES (false, 0, interval '0')$$, 'a late call for the previous window is denied and counts nowhere');
SELECT is((SELECT hits FROM mailroom.rate_limits WHERE key = 'login:1'), 1, '... the current window kept its count');
SELECT results_eq($$SELECT allowed, remaining FROM mailroom._rate_limit('login:1', 3, '1 minute', '2026-06-01 12:00:10+00')$$,
  $$VALUES (true, 2)$$, 'a key used with another window starts over');

SELECT throws_ok($$SELECT * FROM mailroom.rate_limit('', 1, '1 s')$$, '22023', 'mailroom: key: must not be empty', 'an empty key is refused');
SELECT throws_ok($$SELECT * FROM mailroom.rate_limit('mailroom/sender:x', 1, '1 s')$$, '22023', 'mailroom: key: the prefix ''mailroom/'' is reserved for send rates (got mailroom/sender:x)', 'the reserved prefix is refused');
SELECT throws_ok($$SELECT * FROM mailroom.rate_limit('k', 0, '1 s')$$, '22023', 'mailroom: limit: must be at least 1 (got 0)', 'a zero limit is refused');
SELECT throws_ok($$SELECT * FROM mailroom.rate_limit('k', NULL, '1 s')$$, '22023', 'mailroom: limit: must be at least 1 (got NULL)', 'a NULL limit is refused');
SELECT throws_ok($$SELECT * FROM mailroom.rate_limit('k', 1, '0.5 ms')$$, '22023', 'mailroom: window: must be at least 1 millisecond (got 00:00:00.0005)', 'a window under 1 ms is refused');
SELECT throws_ok($$SELECT * FROM mailroom.rate_limit('k', 1, '367 days')$$, '22023', 'mailroom: window: must be at most 366 days (got 367 days)', 'a window over 366 days is refused');
SELECT throws_ok($$SELECT * FROM mailroom.rate_limit('k', 5, '1000000 years')$$, '22023', 'mailroom: window: must be at most 366 days (got 1000000 years)', 'a window past bigint microseconds is refused, not 22003');
SELECT throws_ok($$SELECT * FROM mailroom.rate_limit_sliding('k', 5, '1000000 years')$$, '22023', 'mailroom: window: must be at most 366 days (got 1000000 years)', 'the sliding limiter shares the bound');
SELECT is((SELECT count(*) FROM mailroom.rate_limits WHERE key IN ('k', '', 'mailroom/sender:x')), 0::bigint, 'refused calls stored nothing');
SELECT results_eq($$SELECT allowed, remaining FROM mailroom.rate_limit('yearly', 1000, '1 year')$$,
  $$VALUES (true, 999)$$, 'a yearly quota is within the bound');
SELECT results_eq($$SELECT allowed, remaining FROM mailroom.rate_limit_sliding('yearly-s', 1000, '366 days')$$,
  $$VALUES (true, 999)$$, 'so is a sliding window of 366 days');

-- rate_limit itself, at now(): one window, aligned to the epoch around now().
SELECT results_eq($$SELECT * FROM mailroom.rate_limit('now', 1, '1 minute')$$,
  $$VALUES (true, 0, interval '0')$$, 'rate_limit counts a hit at now()');
SELECT ok((SELECT window_start <= now() AND now() < window_start + interval '1 minute' FROM mailroom.rate_limits WHERE key = 'now'),
  '... in the window that holds now()');
SELECT results_eq($$SELECT allowed, remaining, retry_after = (SELECT window_start + interval '1 minute' - now() FROM mailroom.rate_limits WHERE key = 'now')
                      FROM mailroom.rate_limit('now', 1, '1 minute')$$,
  $$VALUES (false, 0, true)$$, 'a second hit is denied until that window ends');

SET LOCAL ROLE mailroom_app;
SELECT results_eq($$SELECT allowed FROM mailroom.rate_limit('app', 1, '1 minute')$$, $$VALUES (true)$$, 'mailroom_app counts hits through rate_limit');
SELECT throws_ok($$SELECT * FROM mailroom._rate_limit('app', 1, '1 minute', '2100-01-01Z')$$, '42501',
  'permission denied for function _rate_limit', 'mailroom_app cannot pick the clock');
SELECT throws_ok($$SELECT * FROM mailroom.rate_limits$$, '42501', NULL, 'mailroom_app cannot read the table directly');
RESET ROLE;

SELECT * FROM finish();
ROLLBACK;
