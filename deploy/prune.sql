-- Deploy mailroom:prune to pg
-- requires: prune@v0.3.0
-- requires: split_messages
-- requires: attempts_finished_at_idx

-- v0.4: retention costs O(mail retired). A finished mail is its contents row
-- and its ledger rows, one of them the finishing row; prune takes the
-- oldest finishing rows through attempts_finished_at_idx, a batch at a time,
-- and deletes those mails' ledger rows (its primary key) and contents
-- rows (primary key). The hot queue is never read or written: a finished
-- mail has no queue row (integrity_problems() reports one that has both).
-- Each batch starts where the last one ended (finished_at >= the last one
-- deleted), so the rows a batch deleted are not walked again by the next
-- one in the same transaction.
--
-- No clock parameter on what an operator may execute: prune(older_than,
-- batch) cuts at now() - older_than; the owner-only twin _prune(older_than,
-- batch, now) pins the clock for tests. batch overrides prune_batch_size
-- for one call.

BEGIN;

DROP FUNCTION mailroom.prune(interval, timestamptz);

CREATE FUNCTION mailroom._prune(
  p_older_than interval    DEFAULT NULL,
  p_batch      integer     DEFAULT NULL,
  p_now        timestamptz DEFAULT now()
)
RETURNS TABLE (messages bigint, attempts bigint, batches integer, more boolean)
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = mailroom, pg_temp
-- A generic plan of the batch statement (planned for any cut-off and batch)
-- may read the whole ledger by hash join; planning each batch costs ~10 ms.
SET plan_cache_mode = force_custom_plan
AS $$
DECLARE
  v_older_than  interval := coalesce(p_older_than, mailroom._setting('attempts_retention')::interval);
  v_batch       integer  := coalesce(p_batch, mailroom._setting('prune_batch_size')::integer, 5000);
  v_max_batches integer  := coalesce(mailroom._setting('prune_max_batches')::integer, 20);
  v_cutoff      timestamptz;
  v_from        timestamptz := '-infinity';
  v_messages    bigint   := 0;
  v_attempts    bigint   := 0;
  v_batches     integer  := 0;
  v_m           bigint;
  v_a           bigint;
  v_last        timestamptz;
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
  IF p_batch IS NOT NULL THEN
    PERFORM mailroom._check_range('batch', p_batch, 1, 1000000);
  END IF;
  PERFORM mailroom._check_range('prune_batch_size', v_batch, 1, 1000000);
  PERFORM mailroom._check_range('prune_max_batches', v_max_batches, 1, 10000);
  v_cutoff := p_now - v_older_than;

  -- Bounded batches: each statement retires at most v_batch mails with all
  -- their ledger rows; one call at most v_max_batches of them. Locked
  -- finishing rows are skipped and taken next time.
  LOOP
    WITH doomed AS (
      SELECT f.message_id AS id, f.finished_at
      FROM mailroom.attempts f
      WHERE f.finished_as IS NOT NULL AND f.finished_at >= v_from AND f.finished_at < v_cutoff
      ORDER BY f.finished_at
      LIMIT v_batch
      FOR UPDATE SKIP LOCKED
    ),
    gone_attempts AS (
      DELETE FROM mailroom.attempts a USING doomed d WHERE a.message_id = d.id RETURNING a.id
    ),
    gone_contents AS (
      DELETE FROM mailroom.contents c USING doomed d WHERE c.id = d.id RETURNING c.id
    )
    -- gone_contents runs whether or not it is read (a data-modifying WITH).
    SELECT (SELECT count(*) FROM doomed), (SELECT count(*) FROM gone_attempts), (SELECT max(doomed.finished_at) FROM doomed)
    INTO v_m, v_a, v_last;
    v_messages := v_messages + v_m;
    v_attempts := v_attempts + v_a;
    v_batches  := v_batches + 1;
    EXIT WHEN v_m < v_batch OR v_batches >= v_max_batches;
    v_from := v_last;
  END LOOP;

  RETURN QUERY SELECT v_messages, v_attempts, v_batches, v_m = v_batch;
END
$$;
ALTER FUNCTION mailroom._prune(interval, integer, timestamptz) OWNER TO mailroom_owner;
REVOKE ALL ON FUNCTION mailroom._prune(interval, integer, timestamptz) FROM PUBLIC;
COMMENT ON FUNCTION mailroom._prune(interval, integer, timestamptz) IS
  'Owner only (tests pin the clock): mailroom.prune with the cut-off at p_now - p_older_than.';

CREATE FUNCTION mailroom.prune(
  p_older_than interval DEFAULT NULL,
  p_batch      integer  DEFAULT NULL
)
RETURNS TABLE (messages bigint, attempts bigint, batches integer, more boolean)
LANGUAGE sql
SECURITY DEFINER
SET search_path = mailroom, pg_temp
AS $$
  SELECT * FROM mailroom._prune(p_older_than, p_batch, now())
$$;
ALTER FUNCTION mailroom.prune(interval, integer) OWNER TO mailroom_owner;
REVOKE ALL ON FUNCTION mailroom.prune(interval, integer) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION mailroom.prune(interval, integer) TO mailroom_operator;
COMMENT ON FUNCTION mailroom.prune(interval, integer) IS
  'Retire finished mail (sent, failed, cancelled) that finished more than p_older_than ago (default: setting attempts_retention; 1 day to 100 years): its contents row and all its ledger rows, oldest first, in batches of p_batch (default: setting prune_batch_size), at most prune_max_batches per call; more = true when it stopped at that bound. Never touches the queue. A retired delivery key can be enqueued (and sent) again.';

COMMIT;
