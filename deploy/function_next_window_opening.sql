-- Deploy mailroom:function_next_window_opening to pg
-- requires: function_next_occurrence

-- Send windows: recipient-local hours (e.g. 08:00-20:00 in the recipient's
-- zone) during which a campaign or scheduled mail may be sent. mailroom
-- applies a window when the message is written (enqueue_campaign,
-- materialize_schedules, schedule changes): run_at is set to the next opening,
-- so claim_batch stays a plain index scan on (status, run_at) and needs no
-- per-row time-zone arithmetic. A window is [start, end) local time; start >
-- end means it spans midnight (22:00-06:00).

BEGIN;

CREATE FUNCTION mailroom._window_check(p_start time, p_end time)
RETURNS void
LANGUAGE plpgsql IMMUTABLE SECURITY DEFINER
SET search_path = mailroom, pg_temp
AS $$
BEGIN
  IF (p_start IS NULL) <> (p_end IS NULL) THEN
    RAISE EXCEPTION 'mailroom: window_%: must be given together with window_%',
      CASE WHEN p_start IS NULL THEN 'start' ELSE 'end' END,
      CASE WHEN p_start IS NULL THEN 'end' ELSE 'start' END
      USING ERRCODE = '22023';
  END IF;
  IF p_start = p_end THEN
    RAISE EXCEPTION 'mailroom: window_end: must differ from window_start (%), an empty window never opens', p_start
      USING ERRCODE = '22023', HINT = 'pass NULL for both to send at any hour';
  END IF;
END
$$;
ALTER FUNCTION mailroom._window_check(time, time) OWNER TO mailroom_owner;
REVOKE ALL ON FUNCTION mailroom._window_check(time, time) FROM PUBLIC;
COMMENT ON FUNCTION mailroom._window_check(time, time) IS
  'Internal: raises 22023 unless a send window is either absent (both NULL) or non-empty (start <> end).';

CREATE FUNCTION mailroom._window_open(p_zone text, p_start time, p_end time, p_at timestamptz)
RETURNS timestamptz
LANGUAGE plpgsql STABLE SECURITY DEFINER
SET search_path = mailroom, pg_temp
AS $$
DECLARE
  v_local timestamp;
  v_time time;
  v_open timestamp;
BEGIN
  IF p_start IS NULL OR p_at IS NULL THEN
    RETURN p_at;
  END IF;
  v_local := p_at AT TIME ZONE p_zone;
  v_time := v_local::time;
  IF (p_start < p_end AND v_time >= p_start AND v_time < p_end)
     OR (p_start > p_end AND (v_time >= p_start OR v_time < p_end)) THEN
    RETURN p_at;
  END IF;
  v_open := v_local::date + p_start;
  IF v_time >= p_start THEN  -- closed for the rest of today: tomorrow's opening
    v_open := v_open + interval '1 day';
  END IF;
  -- An opening inside a DST gap opens after the gap; inside an overlap at its
  -- first occurrence, which may already be past: then it is open now.
  RETURN greatest(mailroom._local_to_instant(v_open, p_zone), p_at);
END
$$;
ALTER FUNCTION mailroom._window_open(text, time, time, timestamptz) OWNER TO mailroom_owner;
REVOKE ALL ON FUNCTION mailroom._window_open(text, time, time, timestamptz) FROM PUBLIC;
COMMENT ON FUNCTION mailroom._window_open(text, time, time, timestamptz) IS
  'Internal: p_at when it lies inside the local window [p_start, p_end) of p_zone (or there is no window), else the instant of the next opening. No validation.';

CREATE FUNCTION mailroom.next_window_opening(p_zone text, p_start time, p_end time, p_at timestamptz DEFAULT now())
RETURNS timestamptz
LANGUAGE plpgsql STABLE SECURITY DEFINER
SET search_path = mailroom, pg_temp
AS $$
BEGIN
  PERFORM mailroom._zone_check(p_zone);
  PERFORM mailroom._window_check(p_start, p_end);
  RETURN mailroom._window_open(p_zone, p_start, p_end, p_at);
END
$$;
ALTER FUNCTION mailroom.next_window_opening(text, time, time, timestamptz) OWNER TO mailroom_owner;
REVOKE ALL ON FUNCTION mailroom.next_window_opening(text, time, time, timestamptz) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION mailroom.next_window_opening(text, time, time, timestamptz) TO mailroom_app, mailroom_operator;
COMMENT ON FUNCTION mailroom.next_window_opening(text, time, time, timestamptz) IS
  'The first instant at or after p_at inside the recipient-local send window [p_start, p_end) of zone p_zone (start > end spans midnight). Raises 22023 on an unknown zone or an empty window.';

COMMIT;
