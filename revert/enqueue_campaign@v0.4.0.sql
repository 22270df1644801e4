-- Revert mailroom:enqueue_campaign from pg
-- Back to v0.3.0: the three functions with p_now, writing mailroom.messages
-- (the v0.3 bodies; split_messages' revert, which runs after this one, puts
-- the messages table back under them).

BEGIN;

DROP FUNCTION mailroom.enqueue_campaign(text, text, text, integer, timestamptz, jsonb, text, time, time, text, jsonb, integer, text, text);
DROP FUNCTION mailroom._campaign_fill(bigint);
DROP FUNCTION mailroom._campaign_open(text, text, integer, timestamptz, jsonb, text, time, time, text, jsonb, integer, text, text);

-- _campaign_open as v0.1.0 defined it (unchanged until v0.4)
CREATE FUNCTION mailroom._campaign_open(
  p_name         text,
  p_template     text,
  p_priority     integer,
  p_send_at      timestamptz,
  p_vars         jsonb,
  p_sender       text,
  p_window_start time,
  p_window_end   time,
  p_time_zone    text,
  p_headers      jsonb,
  p_max_attempts integer,
  p_on_ambiguous text,
  p_now          timestamptz
)
RETURNS bigint
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = mailroom, pg_temp
SET client_min_messages = warning
AS $$
DECLARE
  v_id       bigint;
  v_status   text;
  v_template text;
BEGIN
  IF p_name IS NULL OR btrim(p_name) = '' THEN
    RAISE EXCEPTION 'mailroom: name: a campaign needs a name' USING ERRCODE = '22023';
  END IF;
  IF length(p_name) > 200 OR p_name ~ '[[:cntrl:]]' THEN
    RAISE EXCEPTION 'mailroom: name: at most 200 characters without control characters' USING ERRCODE = '22023';
  END IF;
  IF p_template IS NULL THEN
    RAISE EXCEPTION 'mailroom: template: a campaign needs a template' USING ERRCODE = '22023';
  END IF;
  IF NOT EXISTS (SELECT FROM mailroom.templates WHERE key = p_template) THEN
    RAISE EXCEPTION 'mailroom: template: no template named "%"', p_template
      USING ERRCODE = '22023', HINT = 'Create it with mailroom.upsert_template().';
  END IF;
  PERFORM mailroom._check_range('priority', p_priority, -100, 100);
  IF p_vars IS NULL OR jsonb_typeof(p_vars) <> 'object' THEN
    RAISE EXCEPTION 'mailroom: vars: must be a JSON object' USING ERRCODE = '22023';
  END IF;
  IF p_sender IS NULL OR p_sender !~ '^[A-Za-z0-9][A-Za-z0-9_.:-]{0,63}$' THEN
    RAISE EXCEPTION 'mailroom: sender: "%" is not a sender name (letters, digits and _ . : -, at most 64)', p_sender
      USING ERRCODE = '22023';
  END IF;
  PERFORM mailroom._window_check(p_window_start, p_window_end);
  PERFORM mailroom._zone_check(p_time_zone, 'time_zone');
  PERFORM mailroom._check_headers(p_headers);
  PERFORM mailroom._check_range('max_attempts', p_max_attempts, 1, 100);
  IF p_on_ambiguous IS NULL OR p_on_ambiguous NOT IN ('retry', 'review') THEN
    RAISE EXCEPTION 'mailroom: on_ambiguous: must be retry or review, got %', coalesce(p_on_ambiguous, 'NULL')
      USING ERRCODE = '22023';
  END IF;

  INSERT INTO mailroom.campaigns AS c (name, template_key, vars, headers, priority, sender, max_attempts,
                                       on_ambiguous, send_at, time_zone, window_start, window_end,
                                       created_at, updated_at)
  VALUES (p_name, p_template, p_vars, p_headers, p_priority, p_sender, p_max_attempts,
          p_on_ambiguous, coalesce(p_send_at, p_now), p_time_zone, p_window_start, p_window_end, p_now, p_now)
  ON CONFLICT (name) DO NOTHING
  RETURNING c.id INTO v_id;
  IF v_id IS NULL THEN
    -- A re-run: the campaign's stored settings stay; it only gains recipients.
    -- FOR SHARE holds off a concurrent pause/cancel until this call commits.
    SELECT c.id, c.status, c.template_key INTO v_id, v_status, v_template
    FROM mailroom.campaigns c WHERE c.name = p_name FOR SHARE;
    IF v_status = 'cancelled' THEN
      RAISE EXCEPTION 'mailroom: name: campaign "%" is cancelled', p_name
        USING ERRCODE = '55000', HINT = 'A cancelled campaign takes no more recipients; use a new name.';
    END IF;
    IF v_template <> p_template THEN
      RAISE EXCEPTION 'mailroom: template: campaign "%" exists with template "%", not "%"', p_name, v_template, p_template
        USING ERRCODE = '22023';
    END IF;
  END IF;

  -- Session-private staging table owned by mailroom_owner; the caller may only
  -- add rows to it. DROP fails (and so the call) if the caller made their own.
  DROP TABLE IF EXISTS pg_temp.mailroom_campaign_recipients;
  CREATE TEMPORARY TABLE mailroom_campaign_recipients (
    recipient_id text,
    email        text,
    vars         jsonb,
    time_zone    text
  ) ON COMMIT DROP;
  GRANT INSERT ON pg_temp.mailroom_campaign_recipients TO PUBLIC;
  RETURN v_id;
END
$$;
ALTER FUNCTION mailroom._campaign_open(text, text, integer, timestamptz, jsonb, text, time, time, text, jsonb, integer, text, timestamptz)
  OWNER TO mailroom_owner;
REVOKE ALL ON FUNCTION mailroom._campaign_open(text, text, integer, timestamptz, jsonb, text, time, time, text, jsonb, integer, text, timestamptz)
  FROM PUBLIC;
GRANT EXECUTE ON FUNCTION mailroom._campaign_open(text, text, integer, timestamptz, jsonb, text, time, time, text, jsonb, integer, text, timestamptz)
  TO mailroom_app;
COMMENT ON FUNCTION mailroom._campaign_open(text, text, integer, timestamptz, jsonb, text, time, time, text, jsonb, integer, text, timestamptz) IS
  'Internal step 1 of enqueue_campaign: validate, create or find the campaign by name, create the staging table pg_temp.mailroom_campaign_recipients (INSERT only for the caller).';


-- _address_ok follows validation's hardened _check_address (rework after
-- v0.1.0): octets, invisible code points, a dotted domain whose top label
-- ends in a letter, no reserved "ab--" labels. enqueue uses it as its fast
-- check too, and calls _check_address (which raises) only when it is false.
CREATE OR REPLACE FUNCTION mailroom._address_ok(p_address text)
RETURNS boolean
LANGUAGE sql IMMUTABLE PARALLEL SAFE
AS $$
  SELECT p_address IS NOT NULL
     AND octet_length(p_address) <= 254
     AND p_address !~ '[[:space:][:cntrl:]]'
     AND octet_length(split_part(p_address, '@', 1)) <= 64
     AND position('.' IN split_part(p_address, '@', 2)) > 0
     AND split_part(p_address, '@', 2) ~ '[A-Za-z\u0080-\U0010FFFF]$'
     AND split_part(p_address, '@', 2) !~* '(^|\.)([^.x][^.]|x[^.n])--'
     AND (
       -- fast path for plain ASCII addresses (the full pattern's bounded
       -- repetitions cost ~7 s per million rows, this ~1.5 s) ...
       (p_address ~ '^[A-Za-z0-9!#$%&''*+/=?^_`{|}~-]+(\.[A-Za-z0-9!#$%&''*+/=?^_`{|}~-]+)*@[A-Za-z0-9-]+(\.[A-Za-z0-9-]+)*$'
        AND split_part(p_address, '@', 2) !~ '(^|\.)-|-(\.|$)'
        AND (length(split_part(p_address, '@', 2)) < 64 OR split_part(p_address, '@', 2) !~ '[^.]{64}'))
       -- ... else the full rule, non-ASCII included, without validation's
       -- invisible, format, C1-control, private-use and non-character code points
       OR (p_address ~ '^[A-Za-z0-9!#$%&''*+/=?^_`{|}~\u0080-\U0010FFFF-]+(\.[A-Za-z0-9!#$%&''*+/=?^_`{|}~\u0080-\U0010FFFF-]+)*@([A-Za-z0-9\u0080-\U0010FFFF]([A-Za-z0-9\u0080-\U0010FFFF-]{0,61}[A-Za-z0-9\u0080-\U0010FFFF])?)(\.[A-Za-z0-9\u0080-\U0010FFFF]([A-Za-z0-9\u0080-\U0010FFFF-]{0,61}[A-Za-z0-9\u0080-\U0010FFFF])?)*$'
           AND p_address !~ '[\u0080-\u009F\u00A0\u00AD\u034F\u061C\u115F\u1160\u17B4\u17B5\u180B-\u180F\u1680\u2000-\u200F\u2028-\u202F\u205F-\u206F\u3000\u3164\uE000-\uF8FF\uFDD0-\uFDEF\uFE00-\uFE0F\uFEFF\uFFA0\uFFF0-\uFFFF\U000E0000-\U000E0FFF\U000F0000-\U0010FFFF]'))
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
  v_sql    text;
  v_rerun  boolean;
  v_known  text;
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

  -- A re-run skips known recipients with an anti-join inside the INSERT;
  -- a first run (no message of the campaign yet) needs none. (v0.1.0 always
  -- had it: right after a TRUNCATE + VACUUM the planner saw messages as empty
  -- and rescanned, per recipient, the very table the INSERT was growing:
  -- over 10 minutes for 200,000 recipients. A re-run finds the campaign's
  -- rows on disk, so the planner no longer takes messages for empty.)
  v_rerun := EXISTS (SELECT FROM mailroom.messages m WHERE m.campaign_id = v_c.id);

  -- One statement for every recipient. The address is snapshotted; a
  -- suppressed or malformed address is kept as cancelled (auditable); the send
  -- window is applied once per zone (run_at = the next opening).
  --
  -- Fast path first: a plain INSERT. ON CONFLICT DO NOTHING costs a
  -- speculative insertion per row (about +30 % of the whole call per million
  -- rows, bench/campaign_1m.py), yet it only matters when a row collides:
  -- a recipient_id twice in the query, a concurrent run of the same campaign
  -- (the insert waits for it, then fails), or a delivery key someone already
  -- used. Recipients known before this call are skipped by the anti-join.
  -- On any unique violation the subtransaction is undone and the same
  -- statement runs again with ON CONFLICT DO NOTHING: same result, paid only
  -- when needed.
  v_known := CASE WHEN v_rerun THEN
    'WHERE NOT EXISTS (SELECT FROM mailroom.messages m WHERE m.campaign_id = ($1).id AND m.recipient_id = r.recipient_id)'
    ELSE '' END;
  v_sql := $sql$
  WITH openings AS (
    SELECT z.zone, mailroom._window_open(z.zone, ($1).window_start, ($1).window_end, ($1).send_at) AS run_at
    FROM (SELECT DISTINCT coalesce(r.time_zone, ($1).time_zone) AS zone
          FROM pg_temp.mailroom_campaign_recipients r) z
  ),
  inserted AS (
    INSERT INTO mailroom.messages (
      delivery_key, status, status_reason, priority, run_at, sender, to_address,
      template_key, template_vars, headers, max_attempts, on_ambiguous,
      campaign_id, recipient_id, recipient_zone, created_at, updated_at)
    SELECT 'campaign:' || ($1).id || ':' || r.recipient_id,
           CASE WHEN NOT r.ok OR s.address_key IS NOT NULL THEN 'cancelled'
                WHEN ($1).status = 'paused' THEN 'paused'
                ELSE 'queued' END,
           CASE WHEN NOT r.ok THEN 'invalid_address'
                WHEN s.address_key IS NOT NULL THEN 'suppressed' END,
           ($1).priority, o.run_at, ($1).sender, r.email,
           ($1).template_key, ($1).vars || coalesce(r.vars, '{}'), ($1).headers, ($1).max_attempts, ($1).on_ambiguous,
           ($1).id, r.recipient_id,
           CASE WHEN ($1).window_start IS NOT NULL THEN o.zone END,
           $2, $2
    FROM (SELECT t.*, mailroom._address_ok(t.email) AS ok
          FROM pg_temp.mailroom_campaign_recipients t OFFSET 0) r   -- OFFSET 0: check each address once
    JOIN openings o ON o.zone = coalesce(r.time_zone, ($1).time_zone)
    LEFT JOIN mailroom.suppressions s
      ON r.ok AND s.address_key = mailroom._address_key(r.email)
    %s
    %s
    RETURNING status, run_at
  )
  SELECT count(*), coalesce(bool_or(status = 'queued' AND run_at <= $2), false)
  FROM inserted$sql$;
  BEGIN
    EXECUTE format(v_sql, v_known, '') INTO v_count, v_notify USING v_c, p_now;
  EXCEPTION WHEN unique_violation THEN
    EXECUTE format(v_sql, v_known, 'ON CONFLICT DO NOTHING') INTO v_count, v_notify USING v_c, p_now;
  END;

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
  'Internal step 3 of enqueue_campaign: check the staged rows and write them as messages in one INSERT ... SELECT (plain; on a unique violation again with ON CONFLICT DO NOTHING). Returns how many were added.';

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
-- SECURITY INVOKER: everything here resolves through the caller's search_path,
-- so every operator and type name is pg_catalog's, spelled out (a caller's
-- planted "=" or "text" would otherwise run, with the caller's rights, here).
DECLARE
  v_query pg_catalog.text := pg_catalog.regexp_replace(coalesce(p_recipients, ''), '[[:space:];]+$', '');
  v_id    bigint;
  v_cols  pg_catalog.text[];
  v_extra pg_catalog.text[];
  v_vars  pg_catalog.text;
  v_zone  pg_catalog.text;
BEGIN
  IF pg_catalog.btrim(v_query) OPERATOR(pg_catalog.=) '' THEN
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
  SELECT pg_catalog.array_agg(a.attname::pg_catalog.text ORDER BY a.attnum) INTO v_cols
  FROM pg_catalog.pg_attribute a
  WHERE a.attrelid OPERATOR(pg_catalog.=) 'pg_temp.mailroom_campaign_query'::pg_catalog.regclass AND a.attnum OPERATOR(pg_catalog.>) 0 AND NOT a.attisdropped;
  IF NOT ('recipient_id' OPERATOR(pg_catalog.=) ANY (v_cols)) OR NOT ('email' OPERATOR(pg_catalog.=) ANY (v_cols)) THEN
    RAISE EXCEPTION 'mailroom: recipients: the query must return columns recipient_id and email, it returns %',
      pg_catalog.array_to_string(v_cols, ', ')
      USING ERRCODE = '22023', HINT = 'Optional columns: vars (jsonb), time_zone (text).';
  END IF;
  SELECT pg_catalog.array_agg(c) INTO v_extra FROM pg_catalog.unnest(v_cols) AS c
  WHERE NOT (c OPERATOR(pg_catalog.=) ANY ('{recipient_id,email,vars,time_zone}'::pg_catalog.text[]));
  IF v_extra IS NOT NULL THEN
    RAISE EXCEPTION 'mailroom: recipients: unexpected column(s) %', pg_catalog.array_to_string(v_extra, ', ')
      USING ERRCODE = '22023', HINT = 'Return recipient_id, email and optionally vars (jsonb) and time_zone (text).';
  END IF;
  IF 'vars' OPERATOR(pg_catalog.=) ANY (v_cols) THEN
    SELECT pg_catalog.format_type(a.atttypid, NULL) INTO v_vars FROM pg_catalog.pg_attribute a
    WHERE a.attrelid OPERATOR(pg_catalog.=) 'pg_temp.mailroom_campaign_query'::pg_catalog.regclass AND a.attname OPERATOR(pg_catalog.=) 'vars';
    IF NOT (v_vars OPERATOR(pg_catalog.=) ANY ('{json,jsonb}'::pg_catalog.text[])) THEN
      RAISE EXCEPTION 'mailroom: recipients: column vars must be json or jsonb, not %', v_vars USING ERRCODE = '22023';
    END IF;
  END IF;
  v_zone := CASE WHEN 'time_zone' OPERATOR(pg_catalog.=) ANY (v_cols) THEN 'q.time_zone::pg_catalog.text' ELSE 'NULL' END;
  v_vars := CASE WHEN 'vars' OPERATOR(pg_catalog.=) ANY (v_cols) THEN 'q.vars::pg_catalog.jsonb' ELSE 'NULL' END;

  -- The caller's query, with the caller's rights.
  BEGIN
    EXECUTE pg_catalog.format(
      'INSERT INTO pg_temp.mailroom_campaign_recipients (recipient_id, email, vars, time_zone) '
      'SELECT q.recipient_id::pg_catalog.text, q.email::pg_catalog.text, %s, %s FROM pg_temp.mailroom_campaign_query AS q',
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
