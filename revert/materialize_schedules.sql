-- Revert mailroom:materialize_schedules from pg
-- Back to v0.3.0: materialize_schedules(p_now, p_limit) on the messages table
-- (restored by split_messages' revert later in the revert).

BEGIN;

DROP FUNCTION mailroom.materialize_schedules(integer);
DROP FUNCTION mailroom._materialize_schedules(integer, timestamptz);


CREATE FUNCTION mailroom.materialize_schedules(p_now timestamptz DEFAULT now(), p_limit integer DEFAULT NULL)
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
  -- Each pass turns the next occurrence of up to the remaining budget of due
  -- schedules into one message each and advances them; a schedule due more
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
    inserted AS (
      INSERT INTO mailroom.messages (
        delivery_key, status, status_reason, priority, run_at, sender, to_address,
        template_key, template_vars, schedule_id, recipient_id, recipient_zone, created_at, updated_at)
      SELECT mailroom._schedule_delivery_key(o.id, o.occurs_at, o.time_zone, o.channel),
             CASE WHEN sup.address_key IS NULL THEN 'queued' ELSE 'cancelled' END,
             CASE WHEN sup.address_key IS NULL THEN NULL ELSE 'suppressed' END,
             o.priority,
             mailroom._window_open(o.time_zone, o.window_start, o.window_end, o.occurs_at),
             o.sender, o.to_address, o.template_key, o.vars, o.id, o.recipient_id, o.time_zone, p_now, p_now
      FROM occ o
      LEFT JOIN mailroom.suppressions sup ON sup.address_key = mailroom._address_key(o.to_address)
      WHERE o.occurs_at <= v_horizon
      ON CONFLICT DO NOTHING
      RETURNING status, run_at, sender
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
           (SELECT count(*) FROM inserted),
           (SELECT array_agg(DISTINCT i.sender) FROM inserted i WHERE i.status = 'queued' AND i.run_at <= p_now)
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
ALTER FUNCTION mailroom.materialize_schedules(timestamptz, integer) OWNER TO mailroom_owner;
REVOKE ALL ON FUNCTION mailroom.materialize_schedules(timestamptz, integer) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION mailroom.materialize_schedules(timestamptz, integer) TO mailroom_operator;
COMMENT ON FUNCTION mailroom.materialize_schedules(timestamptz, integer) IS
  'pg_cron job mailroom-materialize, every minute: turn schedule occurrences due within schedule_lookahead into messages (delivery key schedule:<id>:<local period>:<channel>, ON CONFLICT DO NOTHING, send window applied) and advance next_run_at; at most p_limit (default setting schedule_batch) schedules per call. Returns how many messages it created.';

COMMIT;
