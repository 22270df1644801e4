-- Deploy mailroom:reclaim to pg
-- requires: reclaim@v0.3.0
-- requires: split_messages

-- v0.4: expired leases on the hot queue. Each expired attempt writes its
-- ledger row (outcome expired). The mail goes back to queued (on_ambiguous
-- retry) or to review (on_ambiguous review); with its attempts spent it
-- finishes failed (queue row deleted; the expired row is its finishing row).
-- Re-queued mail meets the claim gate like any other, so a suppression or
-- pause decided while it was leased holds (issue 13, hole 1).
-- No p_now on what runners and pg_cron execute (hole 4: reclaim(p_now =>
-- 'infinity') re-queued every live lease); the owner-only _reclaim takes it.

BEGIN;

DROP FUNCTION mailroom.reclaim(timestamptz, integer);

CREATE FUNCTION mailroom._reclaim(p_limit integer DEFAULT 10000, p_now timestamptz DEFAULT now())
RETURNS integer
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = mailroom, pg_temp
-- Expired leases are found through the reclaim index and each is then moved
-- by key: nested loops over index lookups, never a hash over the queue or
-- the ledger, one generic plan per session (runners call this before every
-- claim), never JIT-compiled (see mark_outcomes).
SET enable_seqscan = off
SET enable_hashjoin = off
SET enable_mergejoin = off
SET jit = off
SET plan_cache_mode = force_generic_plan
AS $$
DECLARE
  v_reclaimed integer;
BEGIN
  IF current_setting('transaction_isolation') <> 'read committed' THEN
    RAISE EXCEPTION 'mailroom: transaction_isolation: reclaim runs only under READ COMMITTED, not %',
      current_setting('transaction_isolation') USING ERRCODE = '0A000';
  END IF;
  PERFORM mailroom._check_range('limit', p_limit, 1, 1000000);

  -- A lease that ran out means the runner died or hung: whether the mail went
  -- out is unknown. Mail that must never be duplicated goes to review.
  WITH expired AS (
    SELECT q.id, q.lease_token, q.on_ambiguous = 'review' AS to_review, q.attempts >= q.max_attempts AS spent
    FROM mailroom.queue q
    WHERE q.status = 'sending' AND q.leased_until < p_now
    ORDER BY q.leased_until
    LIMIT p_limit
    FOR UPDATE SKIP LOCKED
  ),
  -- (q.id = ANY (ARRAY[e.id]): a generic plan made on a small queue must
  -- not walk the whole queue later; see claim_batch.)
  failed AS (
    DELETE FROM mailroom.queue q
    USING expired e
    WHERE q.id = ANY (ARRAY[e.id]) AND NOT e.to_review AND e.spent
    RETURNING q.id, q.attempts, q.worker, q.lease_token, q.claimed_at
  ),
  moved AS (
    UPDATE mailroom.queue q
    SET status        = CASE WHEN e.to_review THEN 'review' ELSE 'queued' END,
        status_reason = 'lease expired',
        last_error    = 'lease expired (worker ' || coalesce(q.worker, '?') || ')',
        run_at        = CASE WHEN e.to_review THEN q.run_at ELSE p_now END,
        lease_token   = NULL,
        leased_until  = NULL,
        updated_at    = p_now
    FROM expired e
    WHERE q.id = ANY (ARRAY[e.id]) AND (e.to_review OR NOT e.spent)
    -- RETURNING shows the new row: the token comes from the locked old one.
    RETURNING q.id, q.attempts, q.worker, q.claimed_at, e.lease_token
  ),
  ledger AS (
    INSERT INTO mailroom.attempts (message_id, attempt, worker, lease_token, claimed_at, finished_at, outcome,
                                   finished_as, status_reason, last_error, finish_key)
    SELECT f.id, f.attempts, f.worker, f.lease_token, f.claimed_at, p_now, 'expired',
           'failed', 'attempts exhausted', 'lease expired (worker ' || coalesce(f.worker, '?') || ')', 0
    FROM failed f
    UNION ALL
    SELECT m.id, m.attempts, m.worker, m.lease_token, m.claimed_at, p_now, 'expired', NULL, NULL, NULL,
           nextval('mailroom.attempts_id_seq')
    FROM moved m
  )
  SELECT (SELECT count(*) FROM failed) + (SELECT count(*) FROM moved) INTO v_reclaimed;
  RETURN v_reclaimed;
END
$$;
ALTER FUNCTION mailroom._reclaim(integer, timestamptz) OWNER TO mailroom_owner;
REVOKE ALL ON FUNCTION mailroom._reclaim(integer, timestamptz) FROM PUBLIC;
COMMENT ON FUNCTION mailroom._reclaim(integer, timestamptz) IS
  'Owner-only twin of reclaim with a pinned clock (tests).';

CREATE FUNCTION mailroom.reclaim(p_limit integer DEFAULT 10000)
RETURNS integer
LANGUAGE sql
SECURITY DEFINER
SET search_path = mailroom, pg_temp
AS $$ SELECT mailroom._reclaim(p_limit, now()) $$;
ALTER FUNCTION mailroom.reclaim(integer) OWNER TO mailroom_owner;
REVOKE ALL ON FUNCTION mailroom.reclaim(integer) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION mailroom.reclaim(integer) TO mailroom_runner, mailroom_operator;
COMMENT ON FUNCTION mailroom.reclaim(integer) IS
  'Return mail whose lease expired: to queued (on_ambiguous retry), to review (on_ambiguous review), or finished failed once attempts are spent; each expired attempt is written to the ledger. Runs from pg_cron and before every claim. READ COMMITTED only.';

COMMIT;
