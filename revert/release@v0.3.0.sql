-- Revert mailroom:release from pg: back to the v0.2.0 function (the ledger row opened at claim time)

BEGIN;

CREATE OR REPLACE FUNCTION mailroom.release(
  p_ids   bigint[],
  p_token uuid,
  p_now   timestamptz DEFAULT now()
)
RETURNS integer
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = mailroom, pg_temp
AS $$
DECLARE
  v_released integer;
BEGIN
  IF p_ids IS NULL OR p_token IS NULL THEN
    RAISE EXCEPTION 'mailroom: ids and token: both are required' USING ERRCODE = '22023';
  END IF;

  WITH returned AS (
    UPDATE mailroom.messages m
    SET status = 'queued', status_reason = 'released', attempts = greatest(m.attempts - 1, 0),
        lease_token = NULL, leased_until = NULL, updated_at = p_now
    WHERE m.id = ANY (p_ids) AND m.lease_token = p_token AND m.status = 'sending'
    RETURNING m.id
  ),
  ledger AS (
    UPDATE mailroom.attempts a
    SET outcome = 'released', finished_at = p_now
    FROM returned r
    WHERE a.message_id = r.id AND a.lease_token = p_token AND a.outcome IS NULL
  )
  SELECT count(*) INTO v_released FROM returned;

  IF v_released > 0 THEN
    PERFORM pg_notify('mailroom', 'released');
  END IF;
  RETURN v_released;
END
$$;
ALTER FUNCTION mailroom.release(bigint[], uuid, timestamptz) OWNER TO mailroom_owner;
REVOKE ALL ON FUNCTION mailroom.release(bigint[], uuid, timestamptz) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION mailroom.release(bigint[], uuid, timestamptz) TO mailroom_runner;
COMMENT ON FUNCTION mailroom.release(bigint[], uuid, timestamptz) IS
  'Hand claimed but unsent mail back to the queue at once (graceful shutdown); the attempt does not count.';

COMMIT;
