-- Deploy mailroom:schedule_upsert to pg
-- requires: schedule_upsert@v0.3.0
-- requires: split_messages

-- v0.4: a schedule's live mail is its contents rows (by contents_schedule_idx)
-- whose queue row is queued or paused. Contents are written once, so a change
-- that alters what a queued mail says or when its period is no longer
-- changes it in place: the old mail is finished as cancelled (reason
-- schedule_changed: queue row out, one ledger row) and a new one is written
-- (contents + queue) with the new values, under the period's key, or, when
-- the old mail holds that key, under the key plus ":r<old id>". A change of
-- priority or send window alone only moves the queue row. So:
-- * new rule, zone or channel: the newest queued mail is re-timed to the
--   first occurrence of the new rule (from its old occurrence or now,
--   whichever is earlier) and re-keyed to that local period; older queued
--   ones (a backlog under the old timing) are cancelled, as is a re-keyed mail
--   whose period was already mailed (reason schedule_changed);
-- * new address, template, vars, sender or recipient id: the queued mail is
--   replaced by one with the new values (same period);
-- * new priority or window: the queued mail is moved in place;
-- * deactivated: nothing is written to its mail. claim_batch's gate reads the
--   schedule for every mail it is about to hand out and finishes mail of an
--   inactive schedule as cancelled (reason schedule_inactive), whenever it
--   came back to the queue (issue 13, hole 2). Activated again before an
--   occurrence's mail was claimed, that mail simply goes out, once; mail
--   whose time passed while the schedule was off is cancelled on activation
--   (the schedule starts again from the next occurrence after now).
--
-- Public functions take no p_now (issue 13, hole 4); the owner-only twins
-- _schedule_upsert and _schedule_set_active take it for tests.

BEGIN;

DROP FUNCTION mailroom.schedule_set_active(text, boolean, timestamptz);
DROP FUNCTION mailroom.schedule_upsert(text, text, text, text, text, jsonb, boolean, time, time, text, integer, text, text, timestamptz);

CREATE OR REPLACE FUNCTION mailroom._schedule_delivery_key(p_schedule bigint, p_at timestamptz, p_zone text, p_channel text)
RETURNS text
LANGUAGE sql STABLE
SET search_path = mailroom, pg_temp
AS $$
  SELECT 'schedule:' || p_schedule || ':' || to_char(p_at AT TIME ZONE p_zone, 'YYYY-MM-DD"T"HH24:MI') || ':' || p_channel
$$;
ALTER FUNCTION mailroom._schedule_delivery_key(bigint, timestamptz, text, text) OWNER TO mailroom_owner;
REVOKE ALL ON FUNCTION mailroom._schedule_delivery_key(bigint, timestamptz, text, text) FROM PUBLIC;
COMMENT ON FUNCTION mailroom._schedule_delivery_key(bigint, timestamptz, text, text) IS
  'Internal: schedule:<id>:<local period YYYY-MM-DDTHH:MI in the zone>:<channel>, the delivery key of one occurrence.';

CREATE OR REPLACE FUNCTION mailroom._schedule_retime(p_old mailroom.schedules, p_new mailroom.schedules, p_now timestamptz)
RETURNS mailroom.schedules
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = mailroom, pg_temp
AS $$
DECLARE
  v_spec    mailroom.cron_spec := mailroom._cron_parse(p_new.rule);
  v_timing  boolean := p_new.rule <> p_old.rule OR p_new.time_zone <> p_old.time_zone
                       OR p_new.channel <> p_old.channel;
  v_content boolean := p_new.to_address <> p_old.to_address OR p_new.template_key <> p_old.template_key
                       OR p_new.vars <> p_old.vars OR p_new.sender <> p_old.sender
                       OR p_new.recipient_id IS DISTINCT FROM p_old.recipient_id
                       OR p_new.stream <> p_old.stream;
  v_m       record;
  v_first   boolean := true;
  v_at      timestamptz;
  v_key     text;
  v_run_at  timestamptz;
  v_retimed timestamptz;
BEGIN
  -- Deactivated: nothing is written to its mail for that (the gate finishes
  -- it as schedule_inactive when it comes due; see the header). Other
  -- changes made at the same time still apply to it below, so mail that is
  -- still queued when the schedule is switched back on says what it should.
  IF p_new.active AND NOT p_old.active THEN
    -- Activated again: mail whose time passed while the schedule was off is
    -- finished (the schedule restarts from the next occurrence after now);
    -- mail of an occurrence still ahead stays queued and goes out once
    -- (materializing its period again finds its key taken).
    WITH gone AS (
      DELETE FROM mailroom.queue q
      USING mailroom.contents c
      WHERE c.schedule_id = p_new.id AND q.id = c.id AND q.status IN ('queued', 'paused') AND q.run_at < p_now
      RETURNING q.id, q.attempts, q.last_error
    )
    INSERT INTO mailroom.attempts (message_id, attempt, finished_at, outcome, finished_as, status_reason, last_error)
    SELECT g.id, g.attempts, p_now, 'cancelled', 'cancelled', 'schedule_inactive', g.last_error FROM gone g;
  END IF;

  IF v_timing OR v_content OR p_new.priority <> p_old.priority
     OR p_new.window_start IS DISTINCT FROM p_old.window_start OR p_new.window_end IS DISTINCT FROM p_old.window_end THEN
    FOR v_m IN
      SELECT q.id, c.delivery_key, q.attempts, q.max_attempts, q.run_at, q.status, q.last_error, q.on_ambiguous,
             mailroom._local_to_instant(substring(c.delivery_key FROM '^schedule:[0-9]+:([0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}):')::timestamp,
                                        p_old.time_zone) AS nominal
      FROM mailroom.contents c JOIN mailroom.queue q ON q.id = c.id
      WHERE c.schedule_id = p_new.id AND q.status IN ('queued', 'paused')
      ORDER BY nominal DESC, q.id DESC
      FOR UPDATE OF q
    LOOP
      IF v_timing AND NOT v_first THEN
        v_at := NULL;   -- a backlog of the old timing: stale
      ELSIF v_timing THEN
        v_at := mailroom._next_occurrence(v_spec, p_new.time_zone, least(p_now, v_m.nominal - interval '1 second'));
      ELSE
        v_at := v_m.nominal;
      END IF;
      v_first := false;
      v_key := CASE WHEN v_at IS NOT NULL
                    THEN mailroom._schedule_delivery_key(p_new.id, v_at, p_new.time_zone, p_new.channel) END;
      -- v_m.delivery_key may carry ":r<id>" suffixes (a replaced mail); its
      -- period is the key without them.
      IF v_at IS NULL OR (v_key <> regexp_replace(v_m.delivery_key, '(:r[0-9]+)+$', '')
                          AND EXISTS (SELECT FROM mailroom.contents k
                                      LEFT JOIN mailroom.attempts f ON f.message_id = k.id AND f.finished_as IS NOT NULL
                                      WHERE k.delivery_key = v_key AND f.finished_as IS DISTINCT FROM 'cancelled')) THEN
        -- stale, or its new period is mailed or queued already: finish it
        DELETE FROM mailroom.queue WHERE id = v_m.id;
        INSERT INTO mailroom.attempts (message_id, attempt, finished_at, outcome, finished_as, status_reason, last_error)
        VALUES (v_m.id, v_m.attempts, p_now, 'cancelled', 'cancelled', 'schedule_changed', v_m.last_error);
        CONTINUE;
      END IF;
      v_run_at := mailroom._window_open(p_new.time_zone, p_new.window_start, p_new.window_end,
                                        greatest(v_at, CASE WHEN v_m.attempts > 0 THEN v_m.run_at END));
      IF v_timing OR v_content THEN
        -- What the mail says or which period it is changes: contents are
        -- written once, so the old mail is finished and a new one takes its place.
        -- The period's own key when it is free, else that key plus ":r<old id>"
        -- (unique: the old mail is finished for good). Materializing the
        -- period again finds its key taken either way: never twice.
        IF EXISTS (SELECT FROM mailroom.contents k WHERE k.delivery_key = v_key) THEN
          v_key := v_key || ':r' || v_m.id;
        END IF;
        DELETE FROM mailroom.queue WHERE id = v_m.id;
        INSERT INTO mailroom.attempts (message_id, attempt, finished_at, outcome, finished_as, status_reason, last_error)
        VALUES (v_m.id, v_m.attempts, p_now, 'cancelled', 'cancelled', 'schedule_changed', v_m.last_error);
        WITH content AS (
          INSERT INTO mailroom.contents (delivery_key, sender, to_address, template_key, template_vars, priority,
                                         max_attempts, on_ambiguous, schedule_id, recipient_id, recipient_zone, stream,
                                         created_at)
          VALUES (v_key, p_new.sender, p_new.to_address, p_new.template_key, p_new.vars, p_new.priority,
                  v_m.max_attempts, v_m.on_ambiguous, p_new.id, p_new.recipient_id, p_new.time_zone, p_new.stream,
                  p_now)
          RETURNING id
        )
        INSERT INTO mailroom.queue (id, status, priority, run_at, sender, attempts, max_attempts, on_ambiguous,
                                    last_error, updated_at)
        SELECT content.id, v_m.status, p_new.priority, v_run_at, p_new.sender, v_m.attempts, v_m.max_attempts,
               v_m.on_ambiguous, v_m.last_error, p_now
        FROM content;
      ELSE
        -- priority or window only: the live row moves, the content stays
        UPDATE mailroom.queue SET priority = p_new.priority, run_at = v_run_at, updated_at = p_now
        WHERE id = v_m.id;
      END IF;
      IF v_timing THEN
        v_retimed := v_at;
      END IF;
    END LOOP;
  END IF;

  IF v_retimed IS NOT NULL THEN
    p_new.last_run_at := v_retimed;
    p_new.next_run_at := mailroom._next_occurrence(v_spec, p_new.time_zone, v_retimed);
  ELSIF v_timing OR NOT p_old.active THEN
    p_new.next_run_at := mailroom._next_occurrence(v_spec, p_new.time_zone, p_now);
  END IF;
  IF NOT p_new.active THEN
    p_new.next_run_at := NULL;
  END IF;
  RETURN p_new;
END
$$;
ALTER FUNCTION mailroom._schedule_retime(mailroom.schedules, mailroom.schedules, timestamptz) OWNER TO mailroom_owner;
REVOKE ALL ON FUNCTION mailroom._schedule_retime(mailroom.schedules, mailroom.schedules, timestamptz) FROM PUBLIC;
COMMENT ON FUNCTION mailroom._schedule_retime(mailroom.schedules, mailroom.schedules, timestamptz) IS
  'Internal: apply a schedule change (old row -> new row) to its queued mail (moved in place, or finished and replaced when its content or period changes) and return the new row with next_run_at / last_run_at set.';

-- The implementation, with the clock as a parameter: owner-only (tests run
-- as superuser and pin the clock; no role may move it).
CREATE FUNCTION mailroom._schedule_upsert(
  p_key          text,
  p_to           text,
  p_rule         text,
  p_zone         text,
  p_template     text,
  p_vars         jsonb       DEFAULT '{}',
  p_active       boolean     DEFAULT true,
  p_window_start time        DEFAULT NULL,
  p_window_end   time        DEFAULT NULL,
  p_channel      text        DEFAULT 'email',
  p_priority     integer     DEFAULT 0,
  p_sender       text        DEFAULT 'default',
  p_recipient_id text        DEFAULT NULL,
  p_stream       text        DEFAULT 'broadcast',
  p_now          timestamptz DEFAULT now()
)
RETURNS bigint
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = mailroom, pg_temp
AS $$
DECLARE
  v_spec mailroom.cron_spec;
  v_old  mailroom.schedules;
  v_new  mailroom.schedules;
BEGIN
  -- Everything is checked before anything is written.
  IF p_key IS NULL OR p_key !~ '^[^[:cntrl:]]{1,200}$' THEN
    RAISE EXCEPTION 'mailroom: key: a schedule key of 1 to 200 characters without control characters is required'
      USING ERRCODE = '22023';
  END IF;
  PERFORM mailroom._check_address('to', p_to);
  v_spec := mailroom._cron_parse(p_rule);
  PERFORM mailroom._zone_check(p_zone);
  IF p_template IS NULL OR NOT EXISTS (SELECT FROM mailroom.templates WHERE key = p_template) THEN
    RAISE EXCEPTION 'mailroom: template: no template named "%"', coalesce(p_template, 'NULL')
      USING ERRCODE = '22023', HINT = 'Create it with mailroom.upsert_template().';
  END IF;
  IF p_vars IS NULL OR jsonb_typeof(p_vars) <> 'object' THEN
    RAISE EXCEPTION 'mailroom: vars: must be a JSON object' USING ERRCODE = '22023';
  END IF;
  IF p_active IS NULL THEN
    RAISE EXCEPTION 'mailroom: active: must be true or false' USING ERRCODE = '22023';
  END IF;
  PERFORM mailroom._window_check(p_window_start, p_window_end);
  IF p_channel IS NULL OR p_channel !~ '^[a-z0-9_-]{1,32}$' THEN
    RAISE EXCEPTION 'mailroom: channel: "%" is not a channel name (a-z, 0-9, _ and -, at most 32)', p_channel
      USING ERRCODE = '22023';
  END IF;
  PERFORM mailroom._check_range('priority', p_priority, -100, 100);
  IF p_sender IS NULL OR p_sender !~ '^[A-Za-z0-9][A-Za-z0-9_.:-]{0,63}$' THEN
    RAISE EXCEPTION 'mailroom: sender: "%" is not a sender name (letters, digits and _ . : -, at most 64)', p_sender
      USING ERRCODE = '22023';
  END IF;
  IF p_recipient_id IS NOT NULL AND (p_recipient_id = '' OR length(p_recipient_id) > 200
                                     OR p_recipient_id ~ '[[:cntrl:]]') THEN
    RAISE EXCEPTION 'mailroom: recipient_id: must be NULL or 1 to 200 characters without control characters'
      USING ERRCODE = '22023';
  END IF;
  PERFORM mailroom._check_stream(p_stream);

  SELECT * INTO v_old FROM mailroom.schedules WHERE schedule_key = p_key FOR UPDATE;
  IF NOT FOUND THEN
    INSERT INTO mailroom.schedules AS s (schedule_key, recipient_id, to_address, time_zone, rule, template_key,
                                         vars, channel, priority, sender, window_start, window_end, active,
                                         stream, next_run_at, created_at, updated_at)
    VALUES (p_key, p_recipient_id, p_to, p_zone, p_rule, p_template, p_vars, p_channel, p_priority, p_sender,
            p_window_start, p_window_end, p_active, p_stream,
            CASE WHEN p_active THEN mailroom._next_occurrence(v_spec, p_zone, p_now) END, p_now, p_now)
    ON CONFLICT (schedule_key) DO NOTHING
    RETURNING s.id INTO v_new.id;
    IF v_new.id IS NOT NULL THEN
      RETURN v_new.id;
    END IF;
    -- created concurrently: fall through and update it
    SELECT * INTO v_old FROM mailroom.schedules WHERE schedule_key = p_key FOR UPDATE;
  END IF;

  v_new := v_old;
  v_new.recipient_id := p_recipient_id;  v_new.to_address := p_to;      v_new.time_zone := p_zone;
  v_new.rule := p_rule;                   v_new.template_key := p_template; v_new.vars := p_vars;
  v_new.channel := p_channel;             v_new.priority := p_priority; v_new.sender := p_sender;
  v_new.window_start := p_window_start;   v_new.window_end := p_window_end; v_new.active := p_active;
  v_new.stream := p_stream;
  IF v_new IS NOT DISTINCT FROM v_old THEN
    RETURN v_old.id;   -- nothing changed
  END IF;
  v_new := mailroom._schedule_retime(v_old, v_new, p_now);
  UPDATE mailroom.schedules
  SET recipient_id = v_new.recipient_id, to_address = v_new.to_address, time_zone = v_new.time_zone,
      rule = v_new.rule, template_key = v_new.template_key, vars = v_new.vars, channel = v_new.channel,
      priority = v_new.priority, sender = v_new.sender, window_start = v_new.window_start,
      window_end = v_new.window_end, active = v_new.active, stream = v_new.stream, next_run_at = v_new.next_run_at,
      last_run_at = v_new.last_run_at, updated_at = p_now
  WHERE id = v_old.id;
  RETURN v_old.id;
END
$$;
ALTER FUNCTION mailroom._schedule_upsert(text, text, text, text, text, jsonb, boolean, time, time, text, integer, text, text, text, timestamptz) OWNER TO mailroom_owner;
REVOKE ALL ON FUNCTION mailroom._schedule_upsert(text, text, text, text, text, jsonb, boolean, time, time, text, integer, text, text, text, timestamptz) FROM PUBLIC;
COMMENT ON FUNCTION mailroom._schedule_upsert(text, text, text, text, text, jsonb, boolean, time, time, text, integer, text, text, text, timestamptz) IS
  'Internal (owner only): schedule_upsert with the clock pinned to p_now.';

CREATE FUNCTION mailroom.schedule_upsert(
  p_key          text,
  p_to           text,
  p_rule         text,
  p_zone         text,
  p_template     text,
  p_vars         jsonb       DEFAULT '{}',
  p_active       boolean     DEFAULT true,
  p_window_start time        DEFAULT NULL,
  p_window_end   time        DEFAULT NULL,
  p_channel      text        DEFAULT 'email',
  p_priority     integer     DEFAULT 0,
  p_sender       text        DEFAULT 'default',
  p_recipient_id text        DEFAULT NULL,
  p_stream       text        DEFAULT 'broadcast'
)
RETURNS bigint
LANGUAGE sql
SECURITY DEFINER
SET search_path = mailroom, pg_temp
AS $$
  SELECT mailroom._schedule_upsert(p_key, p_to, p_rule, p_zone, p_template, p_vars, p_active, p_window_start,
                                   p_window_end, p_channel, p_priority, p_sender, p_recipient_id, p_stream, now())
$$;
ALTER FUNCTION mailroom.schedule_upsert(text, text, text, text, text, jsonb, boolean, time, time, text, integer, text, text, text) OWNER TO mailroom_owner;
REVOKE ALL ON FUNCTION mailroom.schedule_upsert(text, text, text, text, text, jsonb, boolean, time, time, text, integer, text, text, text) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION mailroom.schedule_upsert(text, text, text, text, text, jsonb, boolean, time, time, text, integer, text, text, text) TO mailroom_app;
COMMENT ON FUNCTION mailroom.schedule_upsert(text, text, text, text, text, jsonb, boolean, time, time, text, integer, text, text, text) IS
  'Create or change the recurring schedule named p_key: mail p_template to p_to at every local occurrence of cron rule p_rule in IANA zone p_zone (optionally only inside the local send window). A change re-times, replaces or cancels its queued mail. p_stream (default broadcast) is the stream of its mail; changing it replaces the queued mail. Returns the schedule id.';

CREATE FUNCTION mailroom._schedule_set_active(p_key text, p_active boolean, p_now timestamptz DEFAULT now())
RETURNS boolean
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = mailroom, pg_temp
AS $$
DECLARE
  v_old mailroom.schedules;
  v_new mailroom.schedules;
BEGIN
  IF p_active IS NULL THEN
    RAISE EXCEPTION 'mailroom: active: must be true or false' USING ERRCODE = '22023';
  END IF;
  -- The row lock orders this against schedule_upsert and materialize_schedules
  -- (which skips locked schedules); claim_batch reads active without a lock.
  SELECT * INTO v_old FROM mailroom.schedules WHERE schedule_key = p_key FOR UPDATE;
  IF NOT FOUND THEN
    RAISE EXCEPTION 'mailroom: key: no schedule named "%"', coalesce(p_key, 'NULL') USING ERRCODE = '22023';
  END IF;
  IF v_old.active = p_active THEN
    RETURN false;
  END IF;
  v_new := v_old;
  v_new.active := p_active;
  v_new := mailroom._schedule_retime(v_old, v_new, p_now);
  UPDATE mailroom.schedules
  SET active = v_new.active, next_run_at = v_new.next_run_at, last_run_at = v_new.last_run_at, updated_at = p_now
  WHERE id = v_old.id;
  RETURN true;
END
$$;
ALTER FUNCTION mailroom._schedule_set_active(text, boolean, timestamptz) OWNER TO mailroom_owner;
REVOKE ALL ON FUNCTION mailroom._schedule_set_active(text, boolean, timestamptz) FROM PUBLIC;
COMMENT ON FUNCTION mailroom._schedule_set_active(text, boolean, timestamptz) IS
  'Internal (owner only): schedule_set_active with the clock pinned to p_now.';

CREATE FUNCTION mailroom.schedule_set_active(p_key text, p_active boolean)
RETURNS boolean
LANGUAGE sql
SECURITY DEFINER
SET search_path = mailroom, pg_temp
AS $$
  SELECT mailroom._schedule_set_active(p_key, p_active, now())
$$;
ALTER FUNCTION mailroom.schedule_set_active(text, boolean) OWNER TO mailroom_owner;
REVOKE ALL ON FUNCTION mailroom.schedule_set_active(text, boolean) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION mailroom.schedule_set_active(text, boolean) TO mailroom_app, mailroom_operator;
COMMENT ON FUNCTION mailroom.schedule_set_active(text, boolean) IS
  'Deactivate a schedule (no claim that starts after this commits hands out its mail; claim_batch cancels it as schedule_inactive) or activate it again (from the next occurrence after now). Returns false when it already was so.';

COMMIT;
