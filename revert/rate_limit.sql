-- Revert mailroom:rate_limit from pg: the v0.3.0 rate_limit(key, limit, window,
-- p_now) back (as deploy/rate_limit@v0.1.0.sql created it), the twin gone.
-- _rate_check_args did not change; it is restored as the v0.2.0 rework left it.

BEGIN;

DROP FUNCTION mailroom._rate_limit(text, integer, interval, timestamptz);
DROP FUNCTION mailroom.rate_limit(text, integer, interval);

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

CREATE FUNCTION mailroom.rate_limit(
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

ALTER FUNCTION mailroom.rate_limit(text, integer, interval, timestamptz) OWNER TO mailroom_owner;
REVOKE ALL ON FUNCTION mailroom.rate_limit(text, integer, interval, timestamptz) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION mailroom.rate_limit(text, integer, interval, timestamptz) TO mailroom_app;

COMMENT ON FUNCTION mailroom.rate_limit(text, integer, interval, timestamptz) IS
  'Fixed-window limiter: count one hit on p_key and say whether it is within p_limit per p_window (windows aligned to the Unix epoch). Returns (allowed, remaining, retry_after). One upsert; at most p_limit allowed per window, but up to 2 x p_limit across a window boundary: use rate_limit_sliding where that matters. On a database error the CALLER decides: fail open (allow) or fail closed (deny) - see docs/cache-and-rate-limits.md.';

COMMIT;
