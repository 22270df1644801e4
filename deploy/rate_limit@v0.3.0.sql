-- Deploy mailroom:rate_limit to pg
-- requires: table_rate_limits
--
-- Reworked after v0.1.0: _rate_check_args (used by rate_limit and
-- rate_limit_sliding) refuses windows over 366 days; a 1,000,000-year window
-- failed with 22003 'bigint out of range' (tests/test_hostile.py).

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

COMMIT;
