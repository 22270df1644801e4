-- Deploy mailroom:rate_limit_sweep to pg
-- requires: table_rate_limits

BEGIN;

CREATE FUNCTION mailroom.rate_limit_sweep(p_now timestamptz DEFAULT now()) RETURNS bigint
LANGUAGE plpgsql
VOLATILE
SECURITY DEFINER
SET search_path = mailroom, pg_temp
AS $$
DECLARE
  v_count bigint;
BEGIN
  -- One window of grace after a row stops mattering, for calls that arrive late.
  DELETE FROM mailroom.rate_limits WHERE expires_at + window_length < p_now;
  GET DIAGNOSTICS v_count = ROW_COUNT;
  RETURN v_count;
END
$$;

ALTER FUNCTION mailroom.rate_limit_sweep(timestamptz) OWNER TO mailroom_owner;
REVOKE ALL ON FUNCTION mailroom.rate_limit_sweep(timestamptz) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION mailroom.rate_limit_sweep(timestamptz) TO mailroom_operator, mailroom_runner;

COMMENT ON FUNCTION mailroom.rate_limit_sweep(timestamptz) IS
  'Housekeeping (pg_cron job mailroom-rate-limit-sweep, every minute): delete rate-limit rows that carry no state at p_now. Limits stay correct without it; the table just keeps one row per key ever used.';

COMMIT;
