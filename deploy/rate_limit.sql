-- Deploy mailroom:rate_limit to pg (rework for v0.4)
-- requires: rate_limit@v0.3.0
-- requires: split_messages
--
-- Issue 13, item 4: no p_now on anything a role can execute. rate_limit(key,
-- limit, window) judges a hit by the database clock, now() (the old default;
-- a caller could pass any instant and so open any window it liked).
--
-- Tests need a pinned clock: _rate_limit(key, limit, window, p_now) is the
-- same body on a given instant, owner-only (no GRANT: superuser tests call
-- it). The body is copied, not forwarded to. Measured on this 2-core VM
-- (calls in one backend, best of 5-7 interleaved rounds): a public plpgsql
-- function that only forwards to its twin costs one more SECURITY DEFINER
-- call frame with its search_path save/restore, 7.5 -> 9.7 us a cache_get hit
-- (+2 us, ~30 %) and 137 -> 167 us a rate_limit upsert (+20 %); a LANGUAGE sql
-- SECURITY DEFINER forwarder is never inlined (SET and SECURITY DEFINER forbid
-- it) and cost more still (15 us a cache_get hit). The two bodies
-- differ only in now() where the twin says p_now: tests/pgtap/rate_limit.sql
-- checks exactly that, so they cannot drift.
--
-- Also the findable code of issue 13 (item 6): this file defines every function
-- of the change (rate_limit was only in deploy/rate_limit@v0.1.0.sql);
-- _rate_check_args is the v0.2.0 rework's, verbatim.

BEGIN;

CREATE OR REPLACE FUNCTION mailroom._rate_check_args(p_key text, p_limit integer, p_window interval)
RETURNS void
LANGUAGE plpgsql
IMMUTABLE
-- Touches no table and calls only pg_catalog: no SECURITY DEFINER or SET,
-- which would add a GUC save/restore to every rate_limit call.
AS $$
BEGIN
  IF p_key IS NULL OR p_key = '' THEN
    RAISE EXCEPTION 'mailroom: key: must not be empty' USING ERRCODE = '22023';
  END IF;
  IF octet_length(p_key) > 1000 THEN
    RAISE EXCEPTION 'mailroom: key: longer than 1000 bytes (% bytes)', octet_length(p_key)
      USING ERRCODE = '22023';
  END IF;
  IF starts_with(p_key, 'mailroom/') THEN
    RAISE EXCEPTION 'mailroom: key: the prefix ''mailroom/'' is reserved for send rates (got %)', p_key
      USING ERRCODE = '22023';
  END IF;
  IF p_limit IS NULL OR p_limit < 1 THEN
    RAISE EXCEPTION 'mailroom: limit: must be at least 1 (got %)', coalesce(p_limit::text, 'NULL')
      USING ERRCODE = '22023';
  END IF;
  IF p_window IS NULL OR p_window < interval '1 millisecond' THEN
    RAISE EXCEPTION 'mailroom: window: must be at least 1 millisecond (got %)', coalesce(p_window::text, 'NULL')
      USING ERRCODE = '22023';
  END IF;
  -- A year covers daily, monthly and yearly quotas ('1 year' is 365.25 days
  -- as an epoch, 360 as an interval: both pass). Longer windows overflow the
  -- microsecond arithmetic near 292,000 years, and state kept in an UNLOGGED
  -- table (emptied by a crash) cannot honour a limit over years anyway.
  IF p_window > interval '366 days' THEN
    RAISE EXCEPTION 'mailroom: window: must be at most 366 days (got %)', p_window
      USING ERRCODE = '22023';
  END IF;
END
$$;

ALTER FUNCTION mailroom._rate_check_args(text, integer, interval) OWNER TO mailroom_owner;
REVOKE ALL ON FUNCTION mailroom._rate_check_args(text, integer, interval) FROM PUBLIC;
COMMENT ON FUNCTION mailroom._rate_check_args(text, integer, interval) IS
  'Internal: raise 22023 for a bad key, limit or window (1 millisecond to 366 days) of rate_limit / rate_limit_sliding.';

DROP FUNCTION mailroom.rate_limit(text, integer, interval, timestamptz);

CREATE FUNCTION mailroom.rate_limit(
  p_key    text,
  p_limit  integer,
  p_window interval,
  OUT allowed     boolean,
  OUT remaining   integer,
  OUT retry_after interval
)
LANGUAGE plpgsql
VOLATILE
SECURITY DEFINER
SET search_path = mailroom, pg_temp
AS $$
DECLARE
  v_w      bigint;
  v_start  timestamptz;
  v_stored timestamptz;
  v_hits   integer;
BEGIN
  PERFORM mailroom._rate_check_args(p_key, p_limit, p_window);

  -- Windows are aligned to the Unix epoch, so every caller on every host
  -- agrees on the boundaries without talking to each other.
  v_w := (extract(epoch FROM p_window) * 1000000)::bigint;
  v_start := mailroom._from_epoch_us(floor(mailroom._epoch_us(now())::numeric / v_w)::bigint * v_w);

  -- One upsert: concurrent callers queue on the row lock, so no two read the
  -- same count. A call whose window is older than the stored one (it reached
  -- the row after a caller from the next window) changes nothing and is denied.
  INSERT INTO mailroom.rate_limits AS r
         (key, algorithm, window_length, window_start, hits, expires_at)
  VALUES (p_key, 'fixed', p_window, v_start, 1, v_start + p_window)
  ON CONFLICT (key) DO UPDATE
     SET hits = CASE
                  WHEN r.algorithm <> 'fixed' OR r.window_length <> EXCLUDED.window_length
                       OR r.window_start < EXCLUDED.window_start THEN 1
                  WHEN r.window_start = EXCLUDED.window_start THEN least(r.hits, p_limit) + 1
                  ELSE r.hits
                END,
         window_start = CASE
                  WHEN r.algorithm <> 'fixed' OR r.window_length <> EXCLUDED.window_length
                       OR r.window_start < EXCLUDED.window_start THEN EXCLUDED.window_start
                  ELSE r.window_start
                END,
         expires_at = CASE
                  WHEN r.algorithm <> 'fixed' OR r.window_length <> EXCLUDED.window_length
                       OR r.window_start < EXCLUDED.window_start THEN EXCLUDED.expires_at
                  ELSE r.expires_at
                END,
         algorithm = 'fixed',
         window_length = EXCLUDED.window_length,
         slots = NULL,
         slot_hits = NULL
  RETURNING r.hits, r.window_start INTO v_hits, v_stored;

  IF v_stored <> v_start THEN
    allowed := false; remaining := 0; retry_after := interval '0';
  ELSIF v_hits <= p_limit THEN
    allowed := true; remaining := p_limit - v_hits; retry_after := interval '0';
  ELSE
    allowed := false; remaining := 0; retry_after := v_start + p_window - now();
  END IF;
END
$$;

ALTER FUNCTION mailroom.rate_limit(text, integer, interval) OWNER TO mailroom_owner;
REVOKE ALL ON FUNCTION mailroom.rate_limit(text, integer, interval) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION mailroom.rate_limit(text, integer, interval) TO mailroom_app;

COMMENT ON FUNCTION mailroom.rate_limit(text, integer, interval) IS
  'Fixed-window limiter: count one hit on p_key and say whether it is within p_limit per p_window (windows aligned to the Unix epoch, judged by the database clock now()). Returns (allowed, remaining, retry_after). One upsert; at most p_limit allowed per window, but up to 2 x p_limit across a window boundary: use rate_limit_sliding where that matters. On a database error the CALLER decides: fail open (allow) or fail closed (deny) - see docs/cache-and-rate-limits.md.';

-- The twin: rate_limit's body on a given clock (now() -> p_now), for tests only.
CREATE FUNCTION mailroom._rate_limit(
  p_key    text,
  p_limit  integer,
  p_window interval,
  p_now    timestamptz DEFAULT now(),
  OUT allowed     boolean,
  OUT remaining   integer,
  OUT retry_after interval
)
LANGUAGE plpgsql
VOLATILE
SECURITY DEFINER
SET search_path = mailroom, pg_temp
AS $$
DECLARE
  v_w      bigint;
  v_start  timestamptz;
  v_stored timestamptz;
  v_hits   integer;
BEGIN
  PERFORM mailroom._rate_check_args(p_key, p_limit, p_window);

  -- Windows are aligned to the Unix epoch, so every caller on every host
  -- agrees on the boundaries without talking to each other.
  v_w := (extract(epoch FROM p_window) * 1000000)::bigint;
  v_start := mailroom._from_epoch_us(floor(mailroom._epoch_us(p_now)::numeric / v_w)::bigint * v_w);

  -- One upsert: concurrent callers queue on the row lock, so no two read the
  -- same count. A call whose window is older than the stored one (it reached
  -- the row after a caller from the next window) changes nothing and is denied.
  INSERT INTO mailroom.rate_limits AS r
         (key, algorithm, window_length, window_start, hits, expires_at)
  VALUES (p_key, 'fixed', p_window, v_start, 1, v_start + p_window)
  ON CONFLICT (key) DO UPDATE
     SET hits = CASE
                  WHEN r.algorithm <> 'fixed' OR r.window_length <> EXCLUDED.window_length
                       OR r.window_start < EXCLUDED.window_start THEN 1
                  WHEN r.window_start = EXCLUDED.window_start THEN least(r.hits, p_limit) + 1
                  ELSE r.hits
                END,
         window_start = CASE
                  WHEN r.algorithm <> 'fixed' OR r.window_length <> EXCLUDED.window_length
                       OR r.window_start < EXCLUDED.window_start THEN EXCLUDED.window_start
                  ELSE r.window_start
                END,
         expires_at = CASE
                  WHEN r.algorithm <> 'fixed' OR r.window_length <> EXCLUDED.window_length
                       OR r.window_start < EXCLUDED.window_start THEN EXCLUDED.expires_at
                  ELSE r.expires_at
                END,
         algorithm = 'fixed',
         window_length = EXCLUDED.window_length,
         slots = NULL,
         slot_hits = NULL
  RETURNING r.hits, r.window_start INTO v_hits, v_stored;

  IF v_stored <> v_start THEN
    allowed := false; remaining := 0; retry_after := interval '0';
  ELSIF v_hits <= p_limit THEN
    allowed := true; remaining := p_limit - v_hits; retry_after := interval '0';
  ELSE
    allowed := false; remaining := 0; retry_after := v_start + p_window - p_now;
  END IF;
END
$$;

ALTER FUNCTION mailroom._rate_limit(text, integer, interval, timestamptz) OWNER TO mailroom_owner;
REVOKE ALL ON FUNCTION mailroom._rate_limit(text, integer, interval, timestamptz) FROM PUBLIC;

COMMENT ON FUNCTION mailroom._rate_limit(text, integer, interval, timestamptz) IS
  'Internal, owner only (no role may execute it): rate_limit judged at p_now instead of now(), so tests can pin the clock. Same body as rate_limit but for the clock (tests/pgtap/rate_limit.sql compares them).';

COMMIT;
