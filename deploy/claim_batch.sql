-- Deploy mailroom:claim_batch to pg
-- requires: table_messages
-- requires: table_attempts

BEGIN;

CREATE FUNCTION mailroom.claim_batch(
  p_worker text,
  p_limit  integer     DEFAULT 100,
  p_lease  interval    DEFAULT '5 minutes',
  p_sender text        DEFAULT NULL,
  p_now    timestamptz DEFAULT now()
)
RETURNS TABLE (
  id            bigint,
  lease_token   uuid,
  leased_until  timestamptz,
  delivery_key  text,
  attempt       integer,
  max_attempts  integer,
  sender        text,
  to_address    text,
  subject       text,
  body_text     text,
  body_html     text,
  headers       jsonb,
  template_key  text,
  template_vars jsonb,
  on_ambiguous  text
)
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = mailroom, pg_temp
-- Plan with the real limit every time: a generic plan guesses LIMIT $1 at 10%
-- of the table and can pick a hash join over all of it.
SET plan_cache_mode = force_custom_plan
AS $$
#variable_conflict use_column
DECLARE
  v_token uuid := gen_random_uuid();
BEGIN
  IF p_worker IS NULL OR p_worker = '' OR length(p_worker) > 200 THEN
    RAISE EXCEPTION 'mailroom: worker: must be 1 to 200 characters' USING ERRCODE = '22023';
  END IF;
  PERFORM mailroom._check_range('limit', p_limit, 1, 10000);
  PERFORM mailroom._check_lease(p_lease);

  -- One statement. Priorities are walked from the highest down (a loose index
  -- scan over the claim index); within each, due mail is taken oldest first
  -- and locked with SKIP LOCKED. Walking per priority keeps a large batch of
  -- high-priority mail scheduled for later from being scanned on every claim.
  RETURN QUERY
  WITH RECURSIVE priorities AS (
    (SELECT m.priority FROM mailroom.messages m
     WHERE m.status = 'queued'
     ORDER BY m.priority DESC LIMIT 1)
    UNION ALL
    SELECT (SELECT m.priority FROM mailroom.messages m
            WHERE m.status = 'queued' AND m.priority < p.priority
            ORDER BY m.priority DESC LIMIT 1)
    FROM priorities p
    WHERE p.priority IS NOT NULL
  ),
  picked AS (
    SELECT due.id
    FROM priorities p
    CROSS JOIN LATERAL (
      SELECT m.id FROM mailroom.messages m
      WHERE m.status = 'queued'
        AND m.priority = p.priority
        AND m.run_at <= p_now
        AND (p_sender IS NULL OR m.sender = p_sender)
      ORDER BY m.run_at, m.id
      LIMIT p_limit
      FOR UPDATE SKIP LOCKED
    ) due
    LIMIT p_limit
  ),
  claimed AS (
    UPDATE mailroom.messages m
    SET status       = 'sending',
        attempts     = m.attempts + 1,
        lease_token  = v_token,
        leased_until = p_now + p_lease,
        worker       = p_worker,
        claimed_at   = p_now,
        updated_at   = p_now
    FROM picked
    WHERE m.id = picked.id
    RETURNING m.*
  ),
  ledger AS (
    INSERT INTO mailroom.attempts (message_id, delivery_key, attempt, worker, lease_token, claimed_at)
    SELECT c.id, c.delivery_key, c.attempts, p_worker, v_token, p_now
    FROM claimed c
  )
  SELECT c.id, c.lease_token, c.leased_until, c.delivery_key, c.attempts, c.max_attempts,
         c.sender, c.to_address, c.subject, c.body_text, c.body_html, c.headers,
         c.template_key, c.template_vars, c.on_ambiguous
  FROM claimed c
  ORDER BY c.priority DESC, c.run_at, c.id;
END
$$;
ALTER FUNCTION mailroom.claim_batch(text, integer, interval, text, timestamptz) OWNER TO mailroom_owner;
REVOKE ALL ON FUNCTION mailroom.claim_batch(text, integer, interval, text, timestamptz) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION mailroom.claim_batch(text, integer, interval, text, timestamptz) TO mailroom_runner;
COMMENT ON FUNCTION mailroom.claim_batch(text, integer, interval, text, timestamptz) IS
  'Lease up to p_limit due mail (highest priority, then oldest run_at) to p_worker for p_lease under one fresh lease token; NULL p_sender takes any sender. Each claim counts an attempt and opens a ledger row.';

COMMIT;
