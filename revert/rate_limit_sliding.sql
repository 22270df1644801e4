-- Revert mailroom:rate_limit_sliding from pg: the v0.3.0 rate_limit_sliding(key,
-- limit, window, p_now) back. _rate_sliding_take did not change and stays.

BEGIN;

DROP FUNCTION mailroom.rate_limit_sliding(text, integer, interval);

CREATE FUNCTION mailroom.rate_limit_sliding(
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
  v_take record;
BEGIN
  PERFORM mailroom._rate_check_args(p_key, p_limit, p_window);
  v_take := mailroom._rate_sliding_take(p_key, 1, p_limit, p_window, p_now);
  allowed := v_take.granted = 1;
  remaining := v_take.remaining;
  retry_after := v_take.retry_after;
END
$$;

ALTER FUNCTION mailroom.rate_limit_sliding(text, integer, interval, timestamptz) OWNER TO mailroom_owner;
REVOKE ALL ON FUNCTION mailroom.rate_limit_sliding(text, integer, interval, timestamptz) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION mailroom.rate_limit_sliding(text, integer, interval, timestamptz) TO mailroom_app;

COMMENT ON FUNCTION mailroom.rate_limit_sliding(text, integer, interval, timestamptz) IS
  'Sliding-window limiter: count one hit on p_key if it fits. Never more than p_limit hits are allowed in ANY span of p_window (judged in slots of p_window / 50, so sustained throughput is about 2% under p_limit). Returns (allowed, remaining, retry_after). Costs a row lock, a read and a write per call. On a database error the CALLER decides: fail open or fail closed - see docs/cache-and-rate-limits.md.';

COMMIT;
