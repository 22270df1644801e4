-- Revert mailroom:release from pg: back to the v0.3.0 functions (with p_now), on mailroom.messages,
-- which split_messages' revert (next) restores as a table.

-- The ledger is written once per attempt, when it ends (see mark_outcomes):
-- a released lease's row is written here, from the lease on the message.

BEGIN;

DROP FUNCTION mailroom.release(bigint[], uuid);
DROP FUNCTION mailroom._release(bigint[], uuid, timestamptz);

CREATE OR REPLACE FUNCTION mailroom.release(
  p_ids   bigint[],
  p_token uuid,
  p_now   timestamptz DEFAULT now()
)
RETURNS integer
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = mailroom, pg_temp
-- Its ledger lookups are by message id and lease token: nested loops over
-- index lookups, never a hash join reading the whole ledger (see mark_outcomes).
SET enable_hashjoin = off
SET enable_mergejoin = off
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
    RETURNING m.id, m.delivery_key, m.attempts + 1 AS attempt, m.worker, m.claimed_at
  ),
  -- The attempt's ledger row, written now that it ended (see reclaim).
  ledger_closed AS (
    UPDATE mailroom.attempts a
    SET outcome = 'released', finished_at = p_now
    FROM returned r
    WHERE a.message_id = r.id AND a.lease_token = p_token AND a.outcome IS NULL
    RETURNING a.message_id
  ),
  ledger_written AS (
    INSERT INTO mailroom.attempts (message_id, delivery_key, attempt, worker, lease_token, claimed_at,
                                   finished_at, outcome)
    SELECT r.id, r.delivery_key, r.attempt, r.worker, p_token, r.claimed_at, p_now, 'released'
    FROM returned r
    WHERE r.id NOT IN (SELECT c.message_id FROM ledger_closed c)
  )
  SELECT count(*) INTO v_released FROM returned;

  IF v_released > 0 THEN
    PERFORM pg_notify('mailroom', 'released');
  END IF;
  RETURN v_released;
END
$$;
COMMENT ON FUNCTION mailroom.release(bigint[], uuid, timestamptz) IS
  'Hand claimed but unsent mail back to the queue at once (graceful shutdown) and write the released attempt to the ledger; the attempt does not count.';

ALTER FUNCTION mailroom.release(bigint[], uuid, timestamptz) OWNER TO mailroom_owner;
REVOKE ALL ON FUNCTION mailroom.release(bigint[], uuid, timestamptz) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION mailroom.release(bigint[], uuid, timestamptz) TO mailroom_runner;

COMMIT;
