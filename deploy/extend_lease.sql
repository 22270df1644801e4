-- Deploy mailroom:extend_lease to pg
-- requires: extend_lease@v0.3.0
-- requires: split_messages

-- v0.4: leases live on the hot queue. No p_now on what runners execute
-- (issue 13, hole 4: a lease could be extended into 2100, beyond reclaim);
-- the owner-only _extend_lease takes it.

-- A live lease is its token and a deadline (the check constraint allows
-- these only while sending); written so, not as status = 'sending', no plan
-- walks the reclaim index over every lease in flight.

BEGIN;

DROP FUNCTION mailroom.extend_lease(bigint[], uuid, interval, timestamptz);

CREATE FUNCTION mailroom._extend_lease(
  p_ids   bigint[],
  p_token uuid,
  p_lease interval,
  p_now   timestamptz DEFAULT now()
)
RETURNS integer
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = mailroom, pg_temp
AS $$
DECLARE
  v_extended integer;
BEGIN
  IF current_setting('transaction_isolation') <> 'read committed' THEN
    RAISE EXCEPTION 'mailroom: transaction_isolation: extend_lease runs only under READ COMMITTED, not %',
      current_setting('transaction_isolation') USING ERRCODE = '0A000';
  END IF;
  IF p_ids IS NULL OR p_token IS NULL THEN
    RAISE EXCEPTION 'mailroom: ids and token: both are required' USING ERRCODE = '22023';
  END IF;
  PERFORM mailroom._check_lease(p_lease);

  UPDATE mailroom.queue q
  SET leased_until = p_now + p_lease, updated_at = greatest(p_now, q.updated_at)
  WHERE q.id = ANY (p_ids) AND q.lease_token = p_token AND q.leased_until IS NOT NULL;
  GET DIAGNOSTICS v_extended = ROW_COUNT;
  RETURN v_extended;
END
$$;
ALTER FUNCTION mailroom._extend_lease(bigint[], uuid, interval, timestamptz) OWNER TO mailroom_owner;
REVOKE ALL ON FUNCTION mailroom._extend_lease(bigint[], uuid, interval, timestamptz) FROM PUBLIC;
COMMENT ON FUNCTION mailroom._extend_lease(bigint[], uuid, interval, timestamptz) IS
  'Owner-only twin of extend_lease with a pinned clock (tests).';

CREATE FUNCTION mailroom.extend_lease(p_ids bigint[], p_token uuid, p_lease interval)
RETURNS integer
LANGUAGE sql
SECURITY DEFINER
SET search_path = mailroom, pg_temp
AS $$ SELECT mailroom._extend_lease(p_ids, p_token, p_lease, now()) $$;
ALTER FUNCTION mailroom.extend_lease(bigint[], uuid, interval) OWNER TO mailroom_owner;
REVOKE ALL ON FUNCTION mailroom.extend_lease(bigint[], uuid, interval) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION mailroom.extend_lease(bigint[], uuid, interval) TO mailroom_runner;
COMMENT ON FUNCTION mailroom.extend_lease(bigint[], uuid, interval) IS
  'Extend the lease of claimed mail still held under p_token to now + p_lease; returns how many were extended (fewer means some lease was lost). READ COMMITTED only.';

COMMIT;
