-- Revert mailroom:enqueue_campaign from pg
-- Puts back the v0.1.0 _address_ok and _campaign_fill (one INSERT ... ON CONFLICT DO NOTHING).

BEGIN;

CREATE OR REPLACE FUNCTION mailroom._address_ok(p_address text)
RETURNS boolean
LANGUAGE sql IMMUTABLE PARALLEL SAFE
AS $$
  SELECT p_address IS NOT NULL
     AND length(p_address) <= 254
     AND p_address !~ '[[:space:][:cntrl:]]'
     AND length(split_part(p_address, '@', 1)) <= 64
     AND (
       -- fast path for plain ASCII addresses (the full pattern's bounded
       -- repetitions cost ~7 s per million rows, this ~1.5 s) ...
       (p_address ~ '^[A-Za-z0-9!#$%&''*+/=?^_`{|}~-]+(\.[A-Za-z0-9!#$%&''*+/=?^_`{|}~-]+)*@[A-Za-z0-9-]+(\.[A-Za-z0-9-]+)*$'
        AND split_part(p_address, '@', 2) !~ '(^|\.)-|-(\.|$)'
        AND (length(split_part(p_address, '@', 2)) < 64 OR split_part(p_address, '@', 2) !~ '[^.]{64}'))
       -- ... else the full rule, non-ASCII included
       OR p_address ~ '^[A-Za-z0-9!#$%&''*+/=?^_`{|}~\u0080-\U0010FFFF-]+(\.[A-Za-z0-9!#$%&''*+/=?^_`{|}~\u0080-\U0010FFFF-]+)*@([A-Za-z0-9\u0080-\U0010FFFF]([A-Za-z0-9\u0080-\U0010FFFF-]{0,61}[A-Za-z0-9\u0080-\U0010FFFF])?)(\.[A-Za-z0-9\u0080-\U0010FFFF]([A-Za-z0-9\u0080-\U0010FFFF-]{0,61}[A-Za-z0-9\u0080-\U0010FFFF])?)*$')
$$;
COMMENT ON FUNCTION mailroom._address_ok(text) IS
  'Internal: true when the value is a plain email address by the rules of _check_address (which raises instead).';

CREATE OR REPLACE FUNCTION mailroom._campaign_fill(p_campaign bigint, p_now timestamptz)
RETURNS bigint
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = mailroom, pg_temp
AS $$
DECLARE
  v_c      mailroom.campaigns%ROWTYPE;
  v_bad    record;
  v_zone   text;
  v_count  bigint;
  v_notify boolean;
BEGIN
  IF NOT EXISTS (SELECT FROM pg_catalog.pg_class
                 WHERE oid = to_regclass('pg_temp.mailroom_campaign_recipients')
                   AND relnamespace = pg_catalog.pg_my_temp_schema()
                   AND relowner = 'mailroom_owner'::regrole AND relkind = 'r') THEN
    RAISE EXCEPTION 'mailroom: recipients: no staged recipients (call enqueue_campaign)' USING ERRCODE = '55000';
  END IF;
  SELECT * INTO v_c FROM mailroom.campaigns WHERE id = p_campaign FOR SHARE;
  IF NOT FOUND OR v_c.status = 'cancelled' THEN
    RAISE EXCEPTION 'mailroom: campaign: % is unknown or cancelled', p_campaign USING ERRCODE = '55000';
  END IF;

  -- The rows, checked in one pass before anything is written.
  SELECT r.* INTO v_bad FROM pg_temp.mailroom_campaign_recipients r
  WHERE r.recipient_id IS NULL OR r.recipient_id = '' OR r.email IS NULL
     OR (r.vars IS NOT NULL AND jsonb_typeof(r.vars) <> 'object')
  LIMIT 1;
  IF FOUND THEN
    IF v_bad.recipient_id IS NULL OR v_bad.recipient_id = '' THEN
      RAISE EXCEPTION 'mailroom: recipients: recipient_id must not be NULL or empty (email %)', coalesce(v_bad.email, 'NULL')
        USING ERRCODE = '22023';
    ELSIF v_bad.email IS NULL THEN
      RAISE EXCEPTION 'mailroom: recipients: email of recipient "%" is NULL', v_bad.recipient_id
        USING ERRCODE = '22023';
    ELSE
      RAISE EXCEPTION 'mailroom: recipients: vars of recipient "%" must be a JSON object', v_bad.recipient_id
        USING ERRCODE = '22023';
    END IF;
  END IF;
  FOR v_zone IN
    SELECT DISTINCT r.time_zone FROM pg_temp.mailroom_campaign_recipients r
    WHERE r.time_zone IS NOT NULL
      AND NOT EXISTS (SELECT FROM mailroom.time_zones z WHERE z.name = r.time_zone)
  LOOP
    PERFORM mailroom._zone_check(v_zone, 'recipients.time_zone');
  END LOOP;

  -- One statement for every recipient. The address is snapshotted; a
  -- suppressed or malformed address is kept as cancelled (auditable); the send
  -- window is applied once per zone (run_at = the next opening).
  WITH openings AS (
    SELECT z.zone, mailroom._window_open(z.zone, v_c.window_start, v_c.window_end, v_c.send_at) AS run_at
    FROM (SELECT DISTINCT coalesce(r.time_zone, v_c.time_zone) AS zone
          FROM pg_temp.mailroom_campaign_recipients r) z
  ),
  inserted AS (
    INSERT INTO mailroom.messages (
      delivery_key, status, status_reason, priority, run_at, sender, to_address,
      template_key, template_vars, headers, max_attempts, on_ambiguous,
      campaign_id, recipient_id, recipient_zone, created_at, updated_at)
    SELECT 'campaign:' || v_c.id || ':' || r.recipient_id,
           CASE WHEN NOT r.ok OR s.address_key IS NOT NULL THEN 'cancelled'
                WHEN v_c.status = 'paused' THEN 'paused'
                ELSE 'queued' END,
           CASE WHEN NOT r.ok THEN 'invalid_address'
                WHEN s.address_key IS NOT NULL THEN 'suppressed' END,
           v_c.priority, o.run_at, v_c.sender, r.email,
           v_c.template_key, v_c.vars || coalesce(r.vars, '{}'), v_c.headers, v_c.max_attempts, v_c.on_ambiguous,
           v_c.id, r.recipient_id,
           CASE WHEN v_c.window_start IS NOT NULL THEN o.zone END,
           p_now, p_now
    FROM (SELECT t.*, mailroom._address_ok(t.email) AS ok
          FROM pg_temp.mailroom_campaign_recipients t OFFSET 0) r   -- OFFSET 0: check each address once
    JOIN openings o ON o.zone = coalesce(r.time_zone, v_c.time_zone)
    LEFT JOIN mailroom.suppressions s
      ON r.ok AND s.address_key = mailroom._address_key(r.email)
    -- a re-run skips known recipients before any per-row work (the conflict
    -- clause still settles races with a concurrent run)
    WHERE NOT EXISTS (SELECT FROM mailroom.messages m
                      WHERE m.campaign_id = v_c.id AND m.recipient_id = r.recipient_id)
    ON CONFLICT DO NOTHING
    RETURNING status, run_at
  )
  SELECT count(*), coalesce(bool_or(status = 'queued' AND run_at <= p_now), false)
  INTO v_count, v_notify
  FROM inserted;

  DROP TABLE pg_temp.mailroom_campaign_recipients;

  IF v_count > 0 AND v_c.status = 'done' THEN
    UPDATE mailroom.campaigns SET status = 'active', finished_at = NULL, updated_at = p_now WHERE id = v_c.id;
  END IF;
  IF v_notify THEN
    PERFORM pg_notify('mailroom', v_c.sender);
  END IF;
  RETURN v_count;
END
$$;
ALTER FUNCTION mailroom._campaign_fill(bigint, timestamptz) OWNER TO mailroom_owner;
REVOKE ALL ON FUNCTION mailroom._campaign_fill(bigint, timestamptz) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION mailroom._campaign_fill(bigint, timestamptz) TO mailroom_app;
COMMENT ON FUNCTION mailroom._campaign_fill(bigint, timestamptz) IS
  'Internal step 3 of enqueue_campaign: check the staged rows and write them as messages in one INSERT ... SELECT ... ON CONFLICT DO NOTHING. Returns how many were added.';

COMMIT;
