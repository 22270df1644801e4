-- Deploy mailroom:materialize_schedules to pg
-- requires: materialize_schedules@v0.3.0
-- requires: split_messages
-- requires: schedule_upsert

-- v0.4: each pass writes its occurrences as contents (once) and queue rows in
-- one statement, with the same delivery key and ON CONFLICT DO NOTHING, so a
-- re-materialization can never queue a period twice. A suppressed address's
-- occurrence is recorded as cancelled (contents + one ledger row) as an
-- optimisation; claim_batch's gate checks suppressions and the schedule's
-- state again for every mail it hands out, which is what counts.
--
-- The clock: materialize_schedules (pg_cron, operators) takes none; the
-- owner-only twin _materialize_schedules takes p_now for tests.

BEGIN;

DROP FUNCTION mailroom.materialize_schedules(timestamptz, integer);

CREATE FUNCTION mailroom._materialize_schedules(p_limit integer DEFAULT NULL, p_now timestamptz DEFAULT now())
RETURNS integer
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = mailroom, pg_temp
AS $$
DECLARE
  v_limit    integer := coalesce(p_limit, mailroom._setting('schedule_batch')::integer);
  v_horizon  timestamptz := p_now + mailroom._setting('schedule_lookahead')::interval;
  v_late     timestamptz := p_now - mailroom._setting('schedule_max_lateness')::interval;
  v_done     integer := 0;
  v_pass     integer;
  v_created  integer := 0;
  v_new      integer;
  v_senders  text[];
  v_all      text[] := '{}';
BEGIN
  PERFORM mailroom._check_range('limit', v_limit, 1, 1000000);
  IF p_now IS NULL THEN
    RAISE EXCEPTION 'mailroom: now: must not be NULL' USING ERRCODE = '22023';
  END IF;
  -- Each pass turns the next occurrence of up to the remaining budget of due
  -- schedules into one mail each and advances them; a schedule due more
  -- often than the lookahead comes round again in the next pass. The budget
  -- bounds the work of one call, so a long outage drains over several runs.
  LOOP
    WITH due AS (
      SELECT s.*
      FROM mailroom.schedules s
      WHERE s.active AND s.next_run_at <= v_horizon
      ORDER BY s.next_run_at, s.id
      LIMIT v_limit - v_done
      FOR UPDATE SKIP LOCKED
    ),
    parsed AS (
      SELECT d.*, mailroom._cron_parse(d.rule) AS spec FROM due d OFFSET 0
    ),
    occ AS (
      -- An occurrence missed by more than schedule_max_lateness is skipped.
      SELECT p.*,
             CASE WHEN p.next_run_at < v_late
                  THEN mailroom._next_occurrence(p.spec, p.time_zone, v_late - interval '1 second')
                  ELSE p.next_run_at END AS occurs_at
      FROM parsed p OFFSET 0
    ),
    content AS (
      INSERT INTO mailroom.contents (
        delivery_key, sender, to_address, template_key, template_vars, priority,
        schedule_id, recipient_id, recipient_zone, stream, created_at)
      SELECT mailroom._schedule_delivery_key(o.id, o.occurs_at, o.time_zone, o.channel),
             o.sender, o.to_address, o.template_key, o.vars, o.priority, o.id, o.recipient_id, o.time_zone,
             o.stream, p_now
      FROM occ o
      WHERE o.occurs_at <= v_horizon
      ON CONFLICT DO NOTHING
      RETURNING id, schedule_id, to_address, max_attempts, on_ambiguous, stream
    ),
    checked AS (
      SELECT c.id, c.max_attempts, c.on_ambiguous, o.sender, o.priority,
             mailroom._window_open(o.time_zone, o.window_start, o.window_end, o.occurs_at) AS run_at,
             EXISTS (SELECT FROM mailroom.suppressions sup
                     WHERE sup.address_key = mailroom._address_key(c.to_address)
                       AND (sup.stream IS NULL OR sup.stream = c.stream)) AS suppressed
      FROM content c JOIN occ o ON o.id = c.schedule_id
    ),
    live AS (
      INSERT INTO mailroom.queue (id, priority, run_at, sender, max_attempts, on_ambiguous, updated_at)
      SELECT k.id, k.priority, k.run_at, k.sender, k.max_attempts, k.on_ambiguous, p_now
      FROM checked k
      WHERE NOT k.suppressed
      RETURNING run_at, sender
    ),
    finished AS (
      INSERT INTO mailroom.attempts (message_id, attempt, finished_at, outcome, finished_as, status_reason)
      SELECT k.id, 0, p_now, 'cancelled', 'cancelled', 'suppressed'
      FROM checked k
      WHERE k.suppressed
    ),
    advanced AS (
      UPDATE mailroom.schedules s
      SET next_run_at = CASE WHEN o.occurs_at <= v_horizon
                             THEN mailroom._next_occurrence(o.spec, o.time_zone, o.occurs_at)
                             ELSE o.occurs_at END,
          last_run_at = CASE WHEN o.occurs_at <= v_horizon THEN o.occurs_at ELSE s.last_run_at END
      FROM occ o
      WHERE s.id = o.id
      RETURNING s.id
    )
    SELECT (SELECT count(*) FROM advanced),
           (SELECT count(*) FROM checked),
           (SELECT array_agg(DISTINCT l.sender) FROM live l WHERE l.run_at <= p_now)
    INTO v_pass, v_new, v_senders;
    v_done := v_done + v_pass;
    v_created := v_created + v_new;
    v_all := v_all || coalesce(v_senders, '{}');
    EXIT WHEN v_pass = 0 OR v_done >= v_limit;
  END LOOP;
  PERFORM pg_notify('mailroom', s) FROM (SELECT DISTINCT unnest(v_all) AS s) x;
  RETURN v_created;
END
$$;
ALTER FUNCTION mailroom._materialize_schedules(integer, timestamptz) OWNER TO mailroom_owner;
REVOKE ALL ON FUNCTION mailroom._materialize_schedules(integer, timestamptz) FROM PUBLIC;
COMMENT ON FUNCTION mailroom._materialize_schedules(integer, timestamptz) IS
  'Internal (owner only): materialize_schedules with the clock pinned to p_now.';

CREATE FUNCTION mailroom.materialize_schedules(p_limit integer DEFAULT NULL)
RETURNS integer
LANGUAGE sql
SECURITY DEFINER
SET search_path = mailroom, pg_temp
AS $$
  SELECT mailroom._materialize_schedules(p_limit, now())
$$;
ALTER FUNCTION mailroom.materialize_schedules(integer) OWNER TO mailroom_owner;
REVOKE ALL ON FUNCTION mailroom.materialize_schedules(integer) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION mailroom.materialize_schedules(integer) TO mailroom_operator;
COMMENT ON FUNCTION mailroom.materialize_schedules(integer) IS
  'pg_cron job mailroom-materialize, every minute: turn schedule occurrences due within schedule_lookahead into mail (delivery key schedule:<id>:<local period>:<channel>, ON CONFLICT DO NOTHING, send window applied) and advance next_run_at; at most p_limit (default setting schedule_batch) schedules per call. Returns how many mails it created.';

COMMIT;
