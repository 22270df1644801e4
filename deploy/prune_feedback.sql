-- Deploy mailroom:prune_feedback to pg
-- requires: table_feedback_events
-- requires: table_inbound_unparsed
-- requires: settings_operations
-- requires: validation
-- requires: set_setting_typed

-- Retention for what came back after mail left, the way prune does it for
-- the ledger: settings for the age, batches bounded by prune_batch_size and
-- prune_max_batches, each batch the oldest rows by receipt time through an
-- index, so a call costs O(rows retired) however long the history is.
--
-- Two ages, because the tables hold different things:
--   feedback_events (setting feedback_retention, 90 days): the figures per
--     campaign, sender and stream, kept longer than the ledger's 30 days (the
--     mail they are about may be gone; their rows copy what the rates need).
--     An event's key is also what makes a resent DSN or retried webhook count
--     once, so _check_setting keeps it at 7 days or more.
--   inbound_unparsed (setting inbound_unparsed_retention, 14 days): raw
--     inbound mail, whole — replies, out-of-office mail, reports quoting the
--     original: personal data an operator looks at soon or not at all, so it
--     is kept for less time than the ledger.
--
-- No clock parameter on what an operator may execute: prune_feedback(batch)
-- cuts at now() - each setting; the owner-only twin _prune_feedback(batch,
-- now) pins the clock for tests.

BEGIN;

-- The oldest events first, without reading the younger ones.
CREATE INDEX feedback_events_received_at_idx ON mailroom.feedback_events (received_at);
COMMENT ON INDEX mailroom.feedback_events_received_at_idx IS
  'What prune_feedback walks: events by receipt time, the oldest first.';

INSERT INTO mailroom.settings (key, value, description) VALUES
  ('feedback_retention', '90 days',
   'Feedback events (bounces, complaints, deliveries, unsubscribes reported) older than this are retired by mailroom.prune_feedback. At least 7 days: within it a resent DSN or retried webhook counts once.'),
  ('inbound_unparsed_retention', '14 days',
   'Inbound mail kept unparsed (raw, may hold personal data) older than this is retired by mailroom.prune_feedback; shorter than attempts_retention on purpose.')
ON CONFLICT (key) DO NOTHING;

CREATE FUNCTION mailroom._prune_feedback(
  p_batch integer     DEFAULT NULL,
  p_now   timestamptz DEFAULT now()
)
RETURNS TABLE (feedback_events bigint, inbound_unparsed bigint, batches integer, more boolean)
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = mailroom, pg_temp
AS $$
DECLARE
  v_events_age   text    := mailroom._setting('feedback_retention');
  v_unparsed_age text    := mailroom._setting('inbound_unparsed_retention');
  v_batch        integer := coalesce(p_batch, mailroom._setting('prune_batch_size')::integer, 5000);
  v_max_batches  integer := coalesce(mailroom._setting('prune_max_batches')::integer, 20);
  v_cutoff       timestamptz;
  v_from         timestamptz;
  v_events       bigint  := 0;
  v_unparsed     bigint  := 0;
  v_batches      integer := 0;
  v_more         boolean := false;
  v_n            bigint;
  v_last         timestamptz;
BEGIN
  IF p_now IS NULL THEN
    RAISE EXCEPTION 'mailroom: now: must not be NULL' USING ERRCODE = '22023';
  END IF;
  IF p_batch IS NOT NULL THEN
    PERFORM mailroom._check_range('batch', p_batch, 1, 1000000);
  END IF;
  -- The settings' own bounds (set_setting checks them too; this catches a
  -- row written around it).
  PERFORM mailroom._check_setting('feedback_retention', v_events_age);
  PERFORM mailroom._check_setting('inbound_unparsed_retention', v_unparsed_age);
  PERFORM mailroom._check_range('prune_batch_size', v_batch, 1, 1000000);
  PERFORM mailroom._check_range('prune_max_batches', v_max_batches, 1, 10000);

  -- Each batch one statement of at most v_batch rows, starting where the
  -- last one ended; rows another session has locked wait for the next call.
  -- Each table gets up to v_max_batches batches per call.
  v_cutoff := p_now - v_events_age::interval;
  v_from := '-infinity';
  FOR i IN 1 .. v_max_batches LOOP
    WITH doomed AS (
      SELECT e.id, e.received_at FROM mailroom.feedback_events e
      WHERE e.received_at >= v_from AND e.received_at < v_cutoff
      ORDER BY e.received_at
      LIMIT v_batch
      FOR UPDATE SKIP LOCKED
    ),
    gone AS (
      DELETE FROM mailroom.feedback_events e USING doomed d WHERE e.id = d.id RETURNING d.received_at
    )
    SELECT count(*), max(gone.received_at) INTO v_n, v_last FROM gone;
    v_events := v_events + v_n;
    v_batches := v_batches + 1;
    v_more := v_n = v_batch AND i = v_max_batches;
    EXIT WHEN v_n < v_batch;
    v_from := v_last;
  END LOOP;

  v_cutoff := p_now - v_unparsed_age::interval;
  v_from := '-infinity';
  FOR i IN 1 .. v_max_batches LOOP
    WITH doomed AS (
      SELECT u.id, u.received_at FROM mailroom.inbound_unparsed u
      WHERE u.received_at >= v_from AND u.received_at < v_cutoff
      ORDER BY u.received_at
      LIMIT v_batch
      FOR UPDATE SKIP LOCKED
    ),
    gone AS (
      DELETE FROM mailroom.inbound_unparsed u USING doomed d WHERE u.id = d.id RETURNING d.received_at
    )
    SELECT count(*), max(gone.received_at) INTO v_n, v_last FROM gone;
    v_unparsed := v_unparsed + v_n;
    v_batches := v_batches + 1;
    v_more := v_more OR (v_n = v_batch AND i = v_max_batches);
    EXIT WHEN v_n < v_batch;
    v_from := v_last;
  END LOOP;

  RETURN QUERY SELECT v_events, v_unparsed, v_batches, v_more;
END
$$;
ALTER FUNCTION mailroom._prune_feedback(integer, timestamptz) OWNER TO mailroom_owner;
REVOKE ALL ON FUNCTION mailroom._prune_feedback(integer, timestamptz) FROM PUBLIC;
COMMENT ON FUNCTION mailroom._prune_feedback(integer, timestamptz) IS
  'Owner only (tests pin the clock): mailroom.prune_feedback with the cut-offs at p_now minus each retention setting.';

CREATE FUNCTION mailroom.prune_feedback(p_batch integer DEFAULT NULL)
RETURNS TABLE (feedback_events bigint, inbound_unparsed bigint, batches integer, more boolean)
LANGUAGE sql
SECURITY DEFINER
SET search_path = mailroom, pg_temp
AS $$
  SELECT * FROM mailroom._prune_feedback(p_batch, now())
$$;
ALTER FUNCTION mailroom.prune_feedback(integer) OWNER TO mailroom_owner;
REVOKE ALL ON FUNCTION mailroom.prune_feedback(integer) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION mailroom.prune_feedback(integer) TO mailroom_operator;
COMMENT ON FUNCTION mailroom.prune_feedback(integer) IS
  'Retire feedback events received more than setting feedback_retention ago (90 days by default) and unparsed inbound mail received more than inbound_unparsed_retention ago (14 days), oldest first, in batches of p_batch rows (default: setting prune_batch_size), at most prune_max_batches per table per call; more = true when it stopped at that bound. A retired event''s key, reported again, is recorded as a new event.';

-- Only where pg_cron is installed in this database, like mailroom-prune.
DO $$
BEGIN
  IF EXISTS (SELECT FROM pg_catalog.pg_extension WHERE extname = 'pg_cron') THEN
    PERFORM cron.schedule('mailroom-prune-feedback', '47 * * * *', 'SELECT * FROM mailroom.prune_feedback()');
  END IF;
END
$$;

COMMIT;
