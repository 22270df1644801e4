-- Revert mailroom:prune from pg: back to the v0.3.0 prune(older_than, p_now)
-- on the read model mailroom.messages (split_messages' revert restores the
-- table under it).

BEGIN;

DROP FUNCTION mailroom.prune(interval, integer);
DROP FUNCTION mailroom._prune(interval, integer, timestamptz);

CREATE FUNCTION mailroom.prune(
  p_older_than interval    DEFAULT NULL,
  p_now        timestamptz DEFAULT now()
)
RETURNS TABLE (messages bigint, attempts bigint, batches integer, more boolean)
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = mailroom, pg_temp
AS $$
DECLARE
  v_older_than  interval := coalesce(p_older_than, mailroom._setting('attempts_retention')::interval);
  v_batch       integer  := coalesce(mailroom._setting('prune_batch_size')::integer, 5000);
  v_max_batches integer  := coalesce(mailroom._setting('prune_max_batches')::integer, 20);
  v_messages    bigint   := 0;
  v_attempts    bigint   := 0;
  v_batches     integer  := 0;
  v_m           bigint;
  v_a           bigint;
BEGIN
  -- A lease lasts at most a day, so a late report always finds its ledger row.
  IF v_older_than IS NULL OR v_older_than < interval '1 day' THEN
    RAISE EXCEPTION 'mailroom: older_than: must be at least 1 day, got %', coalesce(v_older_than::text, 'NULL')
      USING ERRCODE = '22023', HINT = 'The default is the setting attempts_retention.';
  END IF;
  -- p_now - older_than must stay a timestamp; a century is past any retention rule.
  IF v_older_than > interval '100 years' THEN
    RAISE EXCEPTION 'mailroom: older_than: must be at most 100 years, got %', v_older_than
      USING ERRCODE = '22023', HINT = 'The default is the setting attempts_retention.';
  END IF;
  IF p_now IS NULL THEN
    RAISE EXCEPTION 'mailroom: now: must not be NULL' USING ERRCODE = '22023';
  END IF;
  PERFORM mailroom._check_range('prune_batch_size', v_batch, 1, 1000000);
  PERFORM mailroom._check_range('prune_max_batches', v_max_batches, 1, 10000);

  -- Bounded batches: each statement deletes at most v_batch messages and
  -- their ledger rows; one call at most v_max_batches of them. Locked rows
  -- (an operator looking at one) are skipped and taken next time.
  LOOP
    WITH doomed AS (
      SELECT m.id FROM mailroom.messages m
      WHERE m.status IN ('sent', 'failed', 'cancelled') AND m.updated_at < p_now - v_older_than
      ORDER BY m.updated_at
      LIMIT v_batch
      FOR UPDATE SKIP LOCKED
    ),
    gone_attempts AS (
      DELETE FROM mailroom.attempts a USING doomed d WHERE a.message_id = d.id RETURNING a.id
    ),
    gone AS (
      DELETE FROM mailroom.messages m USING doomed d WHERE m.id = d.id RETURNING m.id
    )
    SELECT (SELECT count(*) FROM gone), (SELECT count(*) FROM gone_attempts) INTO v_m, v_a;
    v_messages := v_messages + v_m;
    v_attempts := v_attempts + v_a;
    v_batches  := v_batches + 1;
    EXIT WHEN v_m < v_batch OR v_batches >= v_max_batches;
  END LOOP;

  RETURN QUERY SELECT v_messages, v_attempts, v_batches, v_m = v_batch;
END
$$;
ALTER FUNCTION mailroom.prune(interval, timestamptz) OWNER TO mailroom_owner;
REVOKE ALL ON FUNCTION mailroom.prune(interval, timestamptz) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION mailroom.prune(interval, timestamptz) TO mailroom_operator;
COMMENT ON FUNCTION mailroom.prune(interval, timestamptz) IS
  'Delete finished mail (sent, failed, cancelled) last changed more than p_older_than ago (default: setting attempts_retention; 1 day to 100 years) with its ledger rows, in batches of prune_batch_size, at most prune_max_batches per call; more = true when it stopped at that bound. A pruned delivery key can be enqueued (and sent) again.';

COMMIT;
