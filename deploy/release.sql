-- Deploy mailroom:release to pg
-- requires: release@v0.3.0
-- requires: split_messages

-- v0.4: released claims go back to queued on the hot queue (the attempt is
-- not counted) and the released attempt is written to the ledger. The next
-- claim's gate decides again whether the mail may leave. No p_now on what
-- runners execute (issue 13, hole 4); the owner-only _release takes it.

-- A live lease is its token and a deadline (the check constraint allows
-- these only while sending); written so, not as status = 'sending', no plan
-- walks the reclaim index over every lease in flight.

BEGIN;

DROP FUNCTION mailroom.release(bigint[], uuid, timestamptz);

CREATE FUNCTION mailroom._release(
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
  IF current_setting('transaction_isolation') <> 'read committed' THEN
    RAISE EXCEPTION 'mailroom: transaction_isolation: release runs only under READ COMMITTED, not %',
      current_setting('transaction_isolation') USING ERRCODE = '0A000';
  END IF;
  IF p_ids IS NULL OR p_token IS NULL THEN
    RAISE EXCEPTION 'mailroom: ids and token: both are required' USING ERRCODE = '22023';
  END IF;

  WITH returned AS (
    UPDATE mailroom.queue q
    SET status = 'queued', status_reason = 'released', attempts = greatest(q.attempts - 1, 0),
        lease_token = NULL, leased_until = NULL, updated_at = greatest(p_now, q.updated_at)
    WHERE q.id = ANY (p_ids) AND q.lease_token = p_token AND q.leased_until IS NOT NULL
    RETURNING q.id, q.attempts + 1 AS attempt, q.worker, q.claimed_at
  ),
  ledger AS (
    INSERT INTO mailroom.attempts (message_id, attempt, worker, lease_token, claimed_at, finished_at, outcome,
                                   finish_key)
    SELECT r.id, r.attempt, r.worker, p_token, r.claimed_at, greatest(p_now, r.claimed_at), 'released',
           nextval('mailroom.attempts_id_seq')
    FROM returned r
  )
  SELECT count(*) INTO v_released FROM returned;

  IF v_released > 0 THEN
    PERFORM pg_notify('mailroom', 'released');
  END IF;
  RETURN v_released;
END
$$;
ALTER FUNCTION mailroom._release(bigint[], uuid, timestamptz) OWNER TO mailroom_owner;
REVOKE ALL ON FUNCTION mailroom._release(bigint[], uuid, timestamptz) FROM PUBLIC;
COMMENT ON FUNCTION mailroom._release(bigint[], uuid, timestamptz) IS
  'Owner-only twin of release with a pinned clock (tests).';

CREATE FUNCTION mailroom.release(p_ids bigint[], p_token uuid)
RETURNS integer
LANGUAGE sql
SECURITY DEFINER
SET search_path = mailroom, pg_temp
AS $$ SELECT mailroom._release(p_ids, p_token, now()) $$;
ALTER FUNCTION mailroom.release(bigint[], uuid) OWNER TO mailroom_owner;
REVOKE ALL ON FUNCTION mailroom.release(bigint[], uuid) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION mailroom.release(bigint[], uuid) TO mailroom_runner;
COMMENT ON FUNCTION mailroom.release(bigint[], uuid) IS
  'Hand claimed but unsent mail back to the queue at once (graceful shutdown) and write the released attempt to the ledger; the attempt does not count. READ COMMITTED only.';

COMMIT;
