-- Revert mailroom:reclaim from pg: back to the v0.2.0 function (the ledger row opened at claim time)

BEGIN;

CREATE OR REPLACE FUNCTION mailroom.reclaim(p_now timestamptz DEFAULT now(), p_limit integer DEFAULT 10000)
RETURNS integer
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = mailroom, pg_temp
AS $$
DECLARE
  v_reclaimed integer;
BEGIN
  PERFORM mailroom._check_range('limit', p_limit, 1, 1000000);

  -- A lease that ran out means the runner died or hung: whether the mail went
  -- out is unknown. Mail that must never be duplicated goes to review.
  WITH expired AS (
    SELECT m.id, m.lease_token
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
  ledger AS (
    UPDATE mailroom.attempts a
    SET outcome = 'expired', finished_at = p_now
    FROM expired e
    WHERE a.message_id = e.id AND a.lease_token = e.lease_token AND a.outcome IS NULL
  )
  SELECT count(*) INTO v_reclaimed FROM moved;
  RETURN v_reclaimed;
END
$$;
ALTER FUNCTION mailroom.reclaim(timestamptz, integer) OWNER TO mailroom_owner;
REVOKE ALL ON FUNCTION mailroom.reclaim(timestamptz, integer) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION mailroom.reclaim(timestamptz, integer) TO mailroom_runner, mailroom_operator;
COMMENT ON FUNCTION mailroom.reclaim(timestamptz, integer) IS
  'Return mail whose lease expired: to queued (on_ambiguous retry), to review (on_ambiguous review), or to failed once attempts are spent. Runs from pg_cron and before every claim.';

COMMIT;
