-- Revert mailroom:enqueue_campaign from pg
-- Puts back the v0.1.0 _address_ok, _campaign_fill (one INSERT ... ON CONFLICT DO NOTHING)
-- and enqueue_campaign (operators and types left to the caller's search_path).

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

CREATE OR REPLACE FUNCTION mailroom.enqueue_campaign(
  p_name         text,
  p_template     text,
  p_recipients   text,
  p_priority     integer     DEFAULT 0,
  p_send_at      timestamptz DEFAULT NULL,
  p_vars         jsonb       DEFAULT '{}',
  p_sender       text        DEFAULT 'default',
  p_window_start time        DEFAULT NULL,
  p_window_end   time        DEFAULT NULL,
  p_time_zone    text        DEFAULT 'UTC',
  p_headers      jsonb       DEFAULT '{}',
  p_max_attempts integer     DEFAULT 5,
  p_on_ambiguous text        DEFAULT 'retry',
  p_now          timestamptz DEFAULT now()
)
RETURNS bigint
LANGUAGE plpgsql
SECURITY INVOKER
SET client_min_messages = warning
AS $$
DECLARE
  v_query text := pg_catalog.regexp_replace(coalesce(p_recipients, ''), '[[:space:];]+$', '');
  v_id    bigint;
  v_cols  text[];
  v_extra text[];
  v_vars  text;
  v_zone  text;
BEGIN
  IF pg_catalog.btrim(v_query) = '' THEN
    RAISE EXCEPTION 'mailroom: recipients: a query returning recipient_id, email [, vars] [, time_zone] is required'
      USING ERRCODE = '22023';
  END IF;
  v_id := mailroom._campaign_open(p_name, p_template, p_priority, p_send_at, p_vars, p_sender,
                                  p_window_start, p_window_end, p_time_zone, p_headers,
                                  p_max_attempts, p_on_ambiguous, p_now);

  DROP VIEW IF EXISTS pg_temp.mailroom_campaign_query;
  BEGIN
    EXECUTE pg_catalog.format('CREATE TEMPORARY VIEW mailroom_campaign_query AS SELECT * FROM (%s) AS q', v_query);
  EXCEPTION WHEN OTHERS THEN
    RAISE EXCEPTION 'mailroom: recipients: the query does not run: %', SQLERRM USING ERRCODE = SQLSTATE;
  END;
  SELECT pg_catalog.array_agg(a.attname::text ORDER BY a.attnum) INTO v_cols
  FROM pg_catalog.pg_attribute a
  WHERE a.attrelid = 'pg_temp.mailroom_campaign_query'::regclass AND a.attnum > 0 AND NOT a.attisdropped;
  IF NOT ('recipient_id' = ANY (v_cols)) OR NOT ('email' = ANY (v_cols)) THEN
    RAISE EXCEPTION 'mailroom: recipients: the query must return columns recipient_id and email, it returns %',
      pg_catalog.array_to_string(v_cols, ', ')
      USING ERRCODE = '22023', HINT = 'Optional columns: vars (jsonb), time_zone (text).';
  END IF;
  SELECT pg_catalog.array_agg(c) INTO v_extra FROM pg_catalog.unnest(v_cols) AS c
  WHERE c NOT IN ('recipient_id', 'email', 'vars', 'time_zone');
  IF v_extra IS NOT NULL THEN
    RAISE EXCEPTION 'mailroom: recipients: unexpected column(s) %', pg_catalog.array_to_string(v_extra, ', ')
      USING ERRCODE = '22023', HINT = 'Return recipient_id, email and optionally vars (jsonb) and time_zone (text).';
  END IF;
  IF 'vars' = ANY (v_cols) THEN
    SELECT pg_catalog.format_type(a.atttypid, NULL) INTO v_vars FROM pg_catalog.pg_attribute a
    WHERE a.attrelid = 'pg_temp.mailroom_campaign_query'::regclass AND a.attname = 'vars';
    IF v_vars NOT IN ('json', 'jsonb') THEN
      RAISE EXCEPTION 'mailroom: recipients: column vars must be json or jsonb, not %', v_vars USING ERRCODE = '22023';
    END IF;
  END IF;
  v_zone := CASE WHEN 'time_zone' = ANY (v_cols) THEN 'q.time_zone::text' ELSE 'NULL' END;
  v_vars := CASE WHEN 'vars' = ANY (v_cols) THEN 'q.vars::jsonb' ELSE 'NULL' END;

  -- The caller's query, with the caller's rights.
  BEGIN
    EXECUTE pg_catalog.format(
      'INSERT INTO pg_temp.mailroom_campaign_recipients (recipient_id, email, vars, time_zone) '
      'SELECT q.recipient_id::text, q.email::text, %s, %s FROM pg_temp.mailroom_campaign_query AS q',
      v_vars, v_zone);
  EXCEPTION WHEN OTHERS THEN
    RAISE EXCEPTION 'mailroom: recipients: the query does not run: %', SQLERRM USING ERRCODE = SQLSTATE;
  END;
  DROP VIEW pg_temp.mailroom_campaign_query;

  PERFORM mailroom._campaign_fill(v_id, p_now);
  RETURN v_id;
END
$$;
ALTER FUNCTION mailroom.enqueue_campaign(text, text, text, integer, timestamptz, jsonb, text, time, time, text, jsonb, integer, text, timestamptz)
  OWNER TO mailroom_owner;
REVOKE ALL ON FUNCTION mailroom.enqueue_campaign(text, text, text, integer, timestamptz, jsonb, text, time, time, text, jsonb, integer, text, timestamptz)
  FROM PUBLIC;
GRANT EXECUTE ON FUNCTION mailroom.enqueue_campaign(text, text, text, integer, timestamptz, jsonb, text, time, time, text, jsonb, integer, text, timestamptz)
  TO mailroom_app;
COMMENT ON FUNCTION mailroom.enqueue_campaign(text, text, text, integer, timestamptz, jsonb, text, time, time, text, jsonb, integer, text, timestamptz) IS
  'Queue a campaign: p_recipients is a query (run with the CALLER''s rights; SECURITY INVOKER) returning recipient_id, email and optionally vars (jsonb, merged over p_vars) and time_zone (for the send window; default p_time_zone). One INSERT ... SELECT; idempotent on (campaign name, recipient_id). Returns the campaign id.';

COMMIT;
