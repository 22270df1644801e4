-- Deploy mailroom:rate_limit_sweep to pg (rework for v0.4)
-- requires: rate_limit_sweep@v0.3.0
-- requires: split_messages
-- requires: table_domain_budgets
--
-- Issue 13, item 4: no p_now on anything a role can execute (an operator
-- passing a far-future p_now deleted every row, live limits included).
-- rate_limit_sweep() uses the database clock, now(); its test builds rows
-- around now() instead of pinning the clock. Granted to mailroom_operator only:
-- harden_privileges took the runner's grant away and this release keeps it so.

BEGIN;

DROP FUNCTION mailroom.rate_limit_sweep(timestamptz);

CREATE FUNCTION mailroom.rate_limit_sweep() RETURNS bigint
LANGUAGE plpgsql
VOLATILE
SECURITY DEFINER
SET search_path = mailroom, pg_temp
AS $$
DECLARE
  v_count   bigint;
  v_domains bigint;
BEGIN
  -- One window of grace after a row stops mattering, for calls that arrive late.
  DELETE FROM mailroom.rate_limits WHERE expires_at + window_length < now();
  GET DIAGNOSTICS v_count = ROW_COUNT;
  -- Domain budgets (both windows in a row): a minute of grace.
  DELETE FROM mailroom.domain_budgets WHERE expires_at + interval '1 minute' < now();
  GET DIAGNOSTICS v_domains = ROW_COUNT;
  RETURN v_count + v_domains;
END
$$;

ALTER FUNCTION mailroom.rate_limit_sweep() OWNER TO mailroom_owner;
REVOKE ALL ON FUNCTION mailroom.rate_limit_sweep() FROM PUBLIC;
GRANT EXECUTE ON FUNCTION mailroom.rate_limit_sweep() TO mailroom_operator;

COMMENT ON FUNCTION mailroom.rate_limit_sweep() IS
  'Housekeeping (pg_cron job mailroom-rate-limit-sweep, every minute): delete rate-limit rows and domain budgets that carry no state any more (now()). Limits stay correct without it; the table just keeps one row per key ever used.';

COMMIT;
