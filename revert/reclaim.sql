-- Revert mailroom:reclaim from pg: back to the v0.3.0 functions (with p_now), on mailroom.messages,
-- which split_messages' revert (next) restores as a table.

-- The ledger is written once per attempt, when it ends (see mark_outcomes):
-- an expired lease's row is written here, from the lease on the message.

BEGIN;

DROP FUNCTION mailroom.reclaim(integer);
DROP FUNCTION mailroom._reclaim(integer, timestamptz);

CREATE OR REPLACE FUNCTION mailroom.reclaim(p_now timestamptz DEFAULT now(), p_limit integer DEFAULT 10000)
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
  v_reclaimed integer;
BEGIN
  PERFORM mailroom._check_range('limit', p_limit, 1, 1000000);

  -- A lease that ran out means the runner died or hung: whether the mail went
  -- out is unknown. Mail that must never be duplicated goes to review.
  WITH expired AS (
    SELECT m.id, m.lease_token, m.delivery_key, m.attempts, m.worker, m.claimed_at
    FROM mailroom.messages m
    WHERE m.status = 'sending' AND m.leased_until < p_now
    ORDER BY m.leased_until
    LIMIT p_limit
    FOR UPDATE SKIP LOCKED
  ),
  moved AS (
    UPDATE mailroom.messages m
    SET status        = CASE WHEN m.on_ambiguous = 'review' THEN 'review'
                             WHEN m.attempts >= m.max_attempts THEN 'failed'
                             ELSE 'queued' END,
        status_reason = CASE WHEN m.on_ambiguous = 'review' THEN 'lease expired'
                             WHEN m.attempts >= m.max_attempts THEN 'attempts exhausted'
                             ELSE 'lease expired' END,
        last_error    = 'lease expired (worker ' || coalesce(m.worker, '?') || ')',
        run_at        = CASE WHEN m.on_ambiguous = 'review' OR m.attempts >= m.max_attempts THEN m.run_at
                             ELSE p_now END,
        lease_token   = NULL,
        leased_until  = NULL,
        updated_at    = p_now
    FROM expired e
    WHERE m.id = e.id
    RETURNING m.id
  ),
  -- The attempt's ledger row, written now that it ended: a row opened by a
  -- claim_batch before v0.3.0 is closed, otherwise one is written.
  ledger_closed AS (
    UPDATE mailroom.attempts a
    SET outcome = 'expired', finished_at = p_now
    FROM expired e
    WHERE a.message_id = e.id AND a.lease_token = e.lease_token AND a.outcome IS NULL
    RETURNING a.message_id
  ),
  ledger_written AS (
    INSERT INTO mailroom.attempts (message_id, delivery_key, attempt, worker, lease_token, claimed_at,
                                   finished_at, outcome)
    SELECT e.id, e.delivery_key, e.attempts, e.worker, e.lease_token, e.claimed_at, p_now, 'expired'
    FROM expired e
    WHERE e.id NOT IN (SELECT c.message_id FROM ledger_closed c)
  )
  SELECT count(*) INTO v_reclaimed FROM moved;
  RETURN v_reclaimed;
END
$$;
COMMENT ON FUNCTION mailroom.reclaim(timestamptz, integer) IS
  'Return mail whose lease expired: to queued (on_ambiguous retry), to review (on_ambiguous review), or to failed once attempts are spent, and write each expired attempt to the ledger. Runs from pg_cron and before every claim.';

ALTER FUNCTION mailroom.reclaim(timestamptz, integer) OWNER TO mailroom_owner;
REVOKE ALL ON FUNCTION mailroom.reclaim(timestamptz, integer) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION mailroom.reclaim(timestamptz, integer) TO mailroom_runner, mailroom_operator;

COMMIT;
