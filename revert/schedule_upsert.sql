-- Revert mailroom:schedule_upsert from pg
-- Back to v0.3.0: schedule_upsert (v0.2.0 rework), schedule_set_active and
-- _schedule_retime (v0.1.0) with p_now, on the messages table (restored by
-- split_messages' revert later in the revert). _schedule_delivery_key did not
-- change.

BEGIN;

DROP FUNCTION mailroom.schedule_set_active(text, boolean);
DROP FUNCTION mailroom._schedule_set_active(text, boolean, timestamptz);
DROP FUNCTION mailroom.schedule_upsert(text, text, text, text, text, jsonb, boolean, time, time, text, integer, text, text, text);
DROP FUNCTION mailroom._schedule_upsert(text, text, text, text, text, jsonb, boolean, time, time, text, integer, text, text, text, timestamptz);

CREATE OR REPLACE FUNCTION mailroom._schedule_retime(p_old mailroom.schedules, p_new mailroom.schedules, p_now timestamptz)
RETURNS mailroom.schedules
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = mailroom, pg_temp
AS $$
DECLARE
  v_spec    mailroom.cron_spec := mailroom._cron_parse(p_new.rule);
  v_timing  boolean := p_new.rule <> p_old.rule OR p_new.time_zone <> p_old.time_zone
                       OR p_new.channel <> p_old.channel OR NOT p_old.active;
  v_m       record;
  v_first   boolean := true;
  v_nominal timestamptz;
  v_at      timestamptz;
  v_key     text;
  v_retimed timestamptz;
BEGIN
  IF NOT p_new.active THEN
    -- The period's key is freed (the mail was never handed out), so activating
    -- the schedule again before the occurrence queues it anew.
    UPDATE mailroom.messages
    SET status = 'cancelled', status_reason = 'schedule_inactive', updated_at = p_now,
        delivery_key = delivery_key || ':cancelled:' || id
    WHERE schedule_id = p_new.id AND status IN ('queued', 'paused');
    p_new.next_run_at := NULL;
    RETURN p_new;
  END IF;

  FOR v_m IN
    SELECT m.id, m.delivery_key, m.attempts, m.run_at,
           mailroom._local_to_instant(substring(m.delivery_key FROM '^schedule:[0-9]+:([0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}):')::timestamp,
                                      p_old.time_zone) AS nominal
    FROM mailroom.messages m
    WHERE m.schedule_id = p_new.id AND m.status IN ('queued', 'paused')
    ORDER BY nominal DESC, m.id DESC
    FOR UPDATE
  LOOP
    v_nominal := v_m.nominal;
    IF v_timing AND NOT v_first THEN
      v_at := NULL;   -- a backlog of the old timing: stale
    ELSIF v_timing THEN
      v_at := mailroom._next_occurrence(v_spec, p_new.time_zone, least(p_now, v_nominal - interval '1 second'));
    ELSE
      v_at := v_nominal;
    END IF;
    v_first := false;
    v_key := CASE WHEN v_at IS NOT NULL
                  THEN mailroom._schedule_delivery_key(p_new.id, v_at, p_new.time_zone, p_new.channel) END;
    IF v_at IS NULL OR (v_key <> v_m.delivery_key
                        AND EXISTS (SELECT FROM mailroom.messages WHERE delivery_key = v_key)) THEN
      UPDATE mailroom.messages SET status = 'cancelled', status_reason = 'schedule_changed', updated_at = p_now
      WHERE id = v_m.id;
      CONTINUE;
    END IF;
    UPDATE mailroom.messages
    SET delivery_key   = v_key,
        run_at         = mailroom._window_open(p_new.time_zone, p_new.window_start, p_new.window_end,
                                               greatest(v_at, CASE WHEN v_m.attempts > 0 THEN v_m.run_at END)),
        to_address     = p_new.to_address,
        template_key   = p_new.template_key,
        template_vars  = p_new.vars,
        priority       = p_new.priority,
        sender         = p_new.sender,
        recipient_id   = p_new.recipient_id,
        recipient_zone = p_new.time_zone,
        updated_at     = p_now
    WHERE id = v_m.id;
    IF v_timing THEN
      v_retimed := v_at;
    END IF;
  END LOOP;

  IF v_retimed IS NOT NULL THEN
    p_new.last_run_at := v_retimed;
    p_new.next_run_at := mailroom._next_occurrence(v_spec, p_new.time_zone, v_retimed);
  ELSIF v_timing THEN
    p_new.next_run_at := mailroom._next_occurrence(v_spec, p_new.time_zone, p_now);
  END IF;
  RETURN p_new;
END
$$;
ALTER FUNCTION mailroom._schedule_retime(mailroom.schedules, mailroom.schedules, timestamptz) OWNER TO mailroom_owner;
REVOKE ALL ON FUNCTION mailroom._schedule_retime(mailroom.schedules, mailroom.schedules, timestamptz) FROM PUBLIC;
COMMENT ON FUNCTION mailroom._schedule_retime(mailroom.schedules, mailroom.schedules, timestamptz) IS
  'Internal: apply a schedule change (old row -> new row) to its queued mail and return the new row with next_run_at / last_run_at set.';

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

  SELECT * INTO v_old FROM mailroom.schedules WHERE schedule_key = p_key FOR UPDATE;
  IF NOT FOUND THEN
    INSERT INTO mailroom.schedules AS s (schedule_key, recipient_id, to_address, time_zone, rule, template_key,
                                         vars, channel, priority, sender, window_start, window_end, active,
                                         next_run_at, created_at, updated_at)
    VALUES (p_key, p_recipient_id, p_to, p_zone, p_rule, p_template, p_vars, p_channel, p_priority, p_sender,
            p_window_start, p_window_end, p_active,
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
  IF v_new IS NOT DISTINCT FROM v_old THEN
    RETURN v_old.id;   -- nothing changed
  END IF;
  v_new := mailroom._schedule_retime(v_old, v_new, p_now);
  UPDATE mailroom.schedules
  SET recipient_id = v_new.recipient_id, to_address = v_new.to_address, time_zone = v_new.time_zone,
      rule = v_new.rule, template_key = v_new.template_key, vars = v_new.vars, channel = v_new.channel,
      priority = v_new.priority, sender = v_new.sender, window_start = v_new.window_start,
      window_end = v_new.window_end, active = v_new.active, next_run_at = v_new.next_run_at,
      last_run_at = v_new.last_run_at, updated_at = p_now
  WHERE id = v_old.id;
  RETURN v_old.id;
END
$$;
ALTER FUNCTION mailroom.schedule_upsert(text, text, text, text, text, jsonb, boolean, time, time, text, integer, text, text, timestamptz)
  OWNER TO mailroom_owner;
REVOKE ALL ON FUNCTION mailroom.schedule_upsert(text, text, text, text, text, jsonb, boolean, time, time, text, integer, text, text, timestamptz)
  FROM PUBLIC;
GRANT EXECUTE ON FUNCTION mailroom.schedule_upsert(text, text, text, text, text, jsonb, boolean, time, time, text, integer, text, text, timestamptz)
  TO mailroom_app;
COMMENT ON FUNCTION mailroom.schedule_upsert(text, text, text, text, text, jsonb, boolean, time, time, text, integer, text, text, timestamptz) IS
  'Create or change the recurring schedule named p_key: mail p_template to p_to at every local occurrence of cron rule p_rule in IANA zone p_zone (optionally only inside the local send window). A change re-times or cancels its queued mail. Returns the schedule id.';

CREATE FUNCTION mailroom.schedule_set_active(p_key text, p_active boolean, p_now timestamptz DEFAULT now())
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
  UPDATE mailroom.schedules SET active = v_new.active, next_run_at = v_new.next_run_at, updated_at = p_now
  WHERE id = v_old.id;
  RETURN true;
END
$$;
ALTER FUNCTION mailroom.schedule_set_active(text, boolean, timestamptz) OWNER TO mailroom_owner;
REVOKE ALL ON FUNCTION mailroom.schedule_set_active(text, boolean, timestamptz) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION mailroom.schedule_set_active(text, boolean, timestamptz) TO mailroom_app, mailroom_operator;
COMMENT ON FUNCTION mailroom.schedule_set_active(text, boolean, timestamptz) IS
  'Deactivate a schedule (its queued mail is cancelled) or activate it again (from the next occurrence after now). Returns false when it already was so.';

COMMIT;
