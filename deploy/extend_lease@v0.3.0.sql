-- Deploy mailroom:extend_lease to pg
-- requires: table_messages

BEGIN;

CREATE FUNCTION mailroom.extend_lease(
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
  IF p_ids IS NULL OR p_token IS NULL THEN
    RAISE EXCEPTION 'mailroom: ids and token: both are required' USING ERRCODE = '22023';
  END IF;
  PERFORM mailroom._check_lease(p_lease);

  UPDATE mailroom.messages m
  SET leased_until = p_now + p_lease, updated_at = p_now
  WHERE m.id = ANY (p_ids) AND m.lease_token = p_token AND m.status = 'sending';
  GET DIAGNOSTICS v_extended = ROW_COUNT;
  RETURN v_extended;
END
$$;
ALTER FUNCTION mailroom.extend_lease(bigint[], uuid, interval, timestamptz) OWNER TO mailroom_owner;
REVOKE ALL ON FUNCTION mailroom.extend_lease(bigint[], uuid, interval, timestamptz) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION mailroom.extend_lease(bigint[], uuid, interval, timestamptz) TO mailroom_runner;
COMMENT ON FUNCTION mailroom.extend_lease(bigint[], uuid, interval, timestamptz) IS
  'Extend the lease of claimed mail still held under p_token to now + p_lease; returns how many were extended (fewer means some lease was lost).';

COMMIT;
