-- Revert mailroom:schedule_upsert from pg: the v0.1.0 schedule_upsert back.

BEGIN;

CREATE OR REPLACE FUNCTION mailroom.schedule_upsert(
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

COMMIT;
