-- Deploy mailroom:enqueue_campaign to pg
-- requires: enqueue_campaign@v0.3.0
-- requires: split_messages
-- requires: validation
-- requires: table_suppressions
-- requires: campaign_chunks

-- v0.4: a campaign's mail is written as contents rows (once) by one
-- statement, its queue rows lazily a chunk at a time (the first chunk here),
-- and this file defines every function of the change again (_address_ok,
-- _campaign_open, _campaign_fill, enqueue_campaign), so a reader finds them
-- here.
--
-- enqueue_campaign runs the caller's recipients query WITH THE CALLER'S RIGHTS.
-- Why: the query reads the application's tables (users, ...), which
-- mailroom_owner cannot and should not read; and a query run inside a
-- SECURITY DEFINER function would run as mailroom_owner, so any function it
-- calls, or a data-modifying CTE, would act with mailroom's rights (a confused
-- deputy). A view is no fix: functions inside a view still run as the user
-- who reads it.
--
-- How, in three steps inside the one call (so it is all-or-nothing):
-- 1. _campaign_open (SECURITY DEFINER) validates every argument, creates or
--    finds the campaign, and creates the session-private temporary table
--    pg_temp.mailroom_campaign_recipients OWNED BY mailroom_owner, granting
--    only INSERT on it (a temporary table is invisible to other sessions).
-- 2. enqueue_campaign itself is SECURITY INVOKER: it checks the columns of the
--    caller's query (via a temporary view the caller owns) and copies its rows
--    into that table, as the caller. Every operator and type it names is
--    pg_catalog's, spelled out, so a caller's search_path cannot plant its own.
-- 3. _campaign_fill (SECURITY DEFINER) checks the rows and writes every mail's
--    contents row in ONE statement, then queues the first chunk of the
--    campaign (deploy/campaign_chunks.sql: the rest is queued a chunk at a
--    time as claims need it). It reads only the table mailroom_owner owns:
--    no code of the caller runs with its rights.
-- The caller needs the TEMPORARY privilege on the database (PUBLIC has it by
-- default).
--
-- No p_now: the three functions mailroom_app executes take the database's
-- clock (issue 13, hole 4). Whether a campaign mail may leave (suppressed,
-- campaign paused or cancelled, send window) is decided again by
-- claim_batch's gate when it is claimed; what is decided here only saves the
-- gate work.

BEGIN;

-- Reworked after v0.4.0 (issue 32, item 7): _campaign_fill adds the mails
-- it wrote to mailroom.campaign_mail_counts (campaign_summaries reads its
-- total there); the other functions are as in v0.4.0, replaced in place.

-- _address_ok follows validation's hardened _check_address: octets,
-- invisible code points, a dotted domain whose top label ends in a letter,
-- no reserved "ab--" labels. enqueue uses it as its fast check too, and calls
-- _check_address (which raises) only when it is false.
--
-- It is two tests joined by OR. The first accepts the common plain-ASCII
-- address with one regular expression and three cheap position tests; it
-- only ever says true for an address the second also accepts (each of its
-- parts implies one of the second's, said beside it), so the OR is exactly
-- the second, which is the full rule. A million campaign recipients pay
-- about 1.5 s less (bench/campaign_1m.py); tests/test_hostile_properties.py
-- holds the whole function against _check_address.
CREATE OR REPLACE FUNCTION mailroom._address_ok(p_address text)
RETURNS boolean
LANGUAGE sql IMMUTABLE PARALLEL SAFE
AS $$
  SELECT p_address IS NOT NULL
     AND octet_length(p_address) <= 254
     AND (
       -- the plain-ASCII shortcut:
       -- * the pattern: only ASCII (no space, control or invisible code point);
       --   exactly one @; a dot-atom local part; a domain of at least two
       --   non-empty labels of letters, digits and inner hyphens (none at a
       --   label's start or end), the top one ending in a letter;
       (p_address ~ '^[A-Za-z0-9!#$%&''*+/=?^_`{|}~-]+(\.[A-Za-z0-9!#$%&''*+/=?^_`{|}~-]+)*@([A-Za-z0-9]+(-+[A-Za-z0-9]+)*\.)+([A-Za-z0-9]+-+)*[A-Za-z0-9]*[A-Za-z]$'
        -- * a local part of at most 64 octets (ASCII: one octet a character);
        AND strpos(p_address, '@') <= 65
        -- * no reserved "ab--" label (only looked for when there is a "--");
        AND (strpos(p_address, '--') = 0 OR split_part(p_address, '@', 2) !~* '(^|\.)([^.x][^.]|x[^.n])--')
        -- * no label over 63 (only looked for in a domain of 64 or more).
        AND (octet_length(p_address) - strpos(p_address, '@') < 64 OR split_part(p_address, '@', 2) !~ '[^.]{64}'))
       -- the full rule, for everything else:
       OR (p_address !~ '[[:space:][:cntrl:]]'
           AND octet_length(split_part(p_address, '@', 1)) <= 64
           AND position('.' IN split_part(p_address, '@', 2)) > 0
           AND split_part(p_address, '@', 2) ~ '[A-Za-z\u0080-\U0010FFFF]$'
           AND split_part(p_address, '@', 2) !~* '(^|\.)([^.x][^.]|x[^.n])--'
           AND (
             (p_address ~ '^[A-Za-z0-9!#$%&''*+/=?^_`{|}~-]+(\.[A-Za-z0-9!#$%&''*+/=?^_`{|}~-]+)*@[A-Za-z0-9-]+(\.[A-Za-z0-9-]+)*$'
              AND split_part(p_address, '@', 2) !~ '(^|\.)-|-(\.|$)'
              AND (length(split_part(p_address, '@', 2)) < 64 OR split_part(p_address, '@', 2) !~ '[^.]{64}'))
             -- non-ASCII included, without validation's invisible, format,
             -- C1-control, private-use and non-character code points
             OR (p_address ~ '^[A-Za-z0-9!#$%&''*+/=?^_`{|}~\u0080-\U0010FFFF-]+(\.[A-Za-z0-9!#$%&''*+/=?^_`{|}~\u0080-\U0010FFFF-]+)*@([A-Za-z0-9\u0080-\U0010FFFF]([A-Za-z0-9\u0080-\U0010FFFF-]{0,61}[A-Za-z0-9\u0080-\U0010FFFF])?)(\.[A-Za-z0-9\u0080-\U0010FFFF]([A-Za-z0-9\u0080-\U0010FFFF-]{0,61}[A-Za-z0-9\u0080-\U0010FFFF])?)*$'
                 AND p_address !~ '[\u0080-\u009F\u00A0\u00AD\u034F\u061C\u115F\u1160\u17B4\u17B5\u180B-\u180F\u1680\u2000-\u200F\u2028-\u202F\u205F-\u206F\u3000\u3164\uE000-\uF8FF\uFDD0-\uFDEF\uFE00-\uFE0F\uFEFF\uFFA0\uFFF0-\uFFFF\U000E0000-\U000E0FFF\U000F0000-\U0010FFFF]'))))
$$;
COMMENT ON FUNCTION mailroom._address_ok(text) IS
  'Internal: true when the value is a plain email address by the rules of _check_address (which raises instead).';

CREATE OR REPLACE FUNCTION mailroom._campaign_open(
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
  p_stream       text
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
  v_stream   text;
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
  PERFORM mailroom._check_stream(p_stream);

  INSERT INTO mailroom.campaigns AS c (name, template_key, vars, headers, priority, sender, max_attempts,
                                       on_ambiguous, send_at, time_zone, window_start, window_end,
                                       stream, created_at, updated_at)
  VALUES (p_name, p_template, p_vars, p_headers, p_priority, p_sender, p_max_attempts,
          p_on_ambiguous, coalesce(p_send_at, now()), p_time_zone, p_window_start, p_window_end,
          p_stream, now(), now())
  ON CONFLICT (name) DO NOTHING
  RETURNING c.id INTO v_id;
  IF v_id IS NULL THEN
    -- A re-run: the campaign's stored settings stay; it only gains recipients.
    -- FOR SHARE holds off a concurrent pause/cancel until this call commits.
    SELECT c.id, c.status, c.template_key, c.stream INTO v_id, v_status, v_template, v_stream
    FROM mailroom.campaigns c WHERE c.name = p_name FOR SHARE;
    IF v_status = 'cancelled' THEN
      RAISE EXCEPTION 'mailroom: name: campaign "%" is cancelled', p_name
        USING ERRCODE = '55000', HINT = 'A cancelled campaign takes no more recipients; use a new name.';
    END IF;
    IF v_template <> p_template THEN
      RAISE EXCEPTION 'mailroom: template: campaign "%" exists with template "%", not "%"', p_name, v_template, p_template
        USING ERRCODE = '22023';
    END IF;
    IF v_stream <> p_stream THEN
      RAISE EXCEPTION 'mailroom: stream: campaign "%" exists with stream "%", not "%"', p_name, v_stream, p_stream
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
ALTER FUNCTION mailroom._campaign_open(text, text, integer, timestamptz, jsonb, text, time, time, text, jsonb, integer, text, text)
  OWNER TO mailroom_owner;
REVOKE ALL ON FUNCTION mailroom._campaign_open(text, text, integer, timestamptz, jsonb, text, time, time, text, jsonb, integer, text, text)
  FROM PUBLIC;
GRANT EXECUTE ON FUNCTION mailroom._campaign_open(text, text, integer, timestamptz, jsonb, text, time, time, text, jsonb, integer, text, text)
  TO mailroom_app;
COMMENT ON FUNCTION mailroom._campaign_open(text, text, integer, timestamptz, jsonb, text, time, time, text, jsonb, integer, text, text) IS
  'Internal step 1 of enqueue_campaign: validate, create or find the campaign by name, create the staging table pg_temp.mailroom_campaign_recipients (INSERT only for the caller).';

CREATE OR REPLACE FUNCTION mailroom._campaign_fill(p_campaign bigint)
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
  v_fast   text;
  v_rerun  boolean;
  v_known  text;
  v_new_backlog boolean;
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

  -- A re-run skips known recipients with an anti-join on the delivery key
  -- (a campaign's mail is keyed 'campaign:<id>:<recipient_id>', a CHECK of
  -- contents; the same probe skips a key enqueue() already took); a first
  -- run needs none (see v0.2.0: a planner that takes the table for empty
  -- rescans it per recipient).
  v_rerun := EXISTS (SELECT FROM mailroom.contents c WHERE c.campaign_id = v_c.id);

  -- The campaign's backlog row (deploy/campaign_chunks.sql) is held to
  -- the end of this transaction: no claimer queues a chunk of this campaign
  -- meanwhile, so none can pass over rows written here but not committed,
  -- and two runs of one campaign take turns. A campaign without one had
  -- every mail queued: the cursor starts above its last mail, read in the
  -- next statement, once the row is held: a run of this campaign that
  -- committed (and queued its mail) while this one waited for the row is
  -- seen then, not passed over.
  INSERT INTO mailroom.campaign_backlog AS b (campaign_id, queued_through, chunk_first, chunk_middle)
  VALUES (v_c.id, 0, 0, 0)
  ON CONFLICT (campaign_id) DO UPDATE SET updated_at = now()
  RETURNING b.xmax = 0 INTO v_new_backlog;
  IF v_new_backlog THEN
    UPDATE mailroom.campaign_backlog b
    SET queued_through = m.last, chunk_first = m.last, chunk_middle = m.last
    FROM (SELECT coalesce(max(c.id), 0) AS last FROM mailroom.contents c WHERE c.campaign_id = v_c.id) m
    WHERE b.campaign_id = v_c.id;
  END IF;

  -- One statement for every recipient, and only into contents: each mail's
  -- queue row is made later, a chunk at a time (_campaign_queue_chunk, the
  -- first chunk below), and so is the check of its address, its
  -- suppression (a cancelled ledger row, as before) and its send window.
  -- A pause, cancel or suppression is caught again by claim_batch's gate,
  -- which is what guarantees it.
  --
  -- Fast path first: no ON CONFLICT (a speculative insertion per row costs
  -- about +30 % per million rows, bench/campaign_1m.py). A recipient_id
  -- twice in the query, a concurrent run of the same campaign or a delivery
  -- key already used raise unique_violation: the subtransaction is undone and
  -- the fallback below writes the same rows with ON CONFLICT DO NOTHING.
  v_known := CASE WHEN v_rerun THEN
    'WHERE NOT EXISTS (SELECT FROM mailroom.contents k WHERE k.delivery_key = ''campaign:'' || $1 || '':'' || r.recipient_id)'
    ELSE '' END;
  -- Forgotten addresses (mailroom.forget) are left out: never written, so
  -- an erased person is not stored again by a campaign that still lists
  -- them. Only when some address is forgotten: a hash per recipient.
  IF EXISTS (SELECT FROM mailroom.forgotten_addresses) THEN
    v_known := CASE WHEN v_known = '' THEN 'WHERE ' ELSE v_known || ' AND ' END
      || 'NOT EXISTS (SELECT FROM mailroom.forgotten_addresses f WHERE f.key_hash = mailroom._forgotten_hash(mailroom._address_key(r.email)))';
  END IF;
  -- In delivery-key order (the key's own expression and collation, so the
  -- order is the unique index's whatever the database's locale): the index
  -- is filled left to right instead of at random leaves. nextval is taken
  -- after the sort, so ids follow the same order, and so do the chunks.
  v_fast := $sql$
  INSERT INTO mailroom.contents (
    id, delivery_key, sender, to_address, template_key, template_vars, headers, priority, max_attempts,
    on_ambiguous, campaign_id, recipient_id, recipient_zone, stream, created_at)
  SELECT nextval('mailroom.message_ids'), 'campaign:' || $1 || ':' || r.recipient_id, $3, r.email, $4,
         $5 || coalesce(r.vars, '{}'), $6, $7, $8, $9, $1, r.recipient_id,
         CASE WHEN $10 IS NOT NULL THEN coalesce(r.time_zone, $11) END, $12, $2
  FROM pg_temp.mailroom_campaign_recipients r
  %s
  ORDER BY 'campaign:' || $1 || ':' || r.recipient_id$sql$;
  BEGIN
    EXECUTE format(v_fast, v_known)
      USING v_c.id, now(), v_c.sender, v_c.template_key, v_c.vars, v_c.headers, v_c.priority, v_c.max_attempts,
            v_c.on_ambiguous, v_c.window_start, v_c.time_zone, v_c.stream;
    GET DIAGNOSTICS v_count = ROW_COUNT;
  EXCEPTION WHEN unique_violation THEN
    EXECUTE format(v_fast, v_known) || ' ON CONFLICT DO NOTHING'
      USING v_c.id, now(), v_c.sender, v_c.template_key, v_c.vars, v_c.headers, v_c.priority, v_c.max_attempts,
            v_c.on_ambiguous, v_c.window_start, v_c.time_zone, v_c.stream;
    GET DIAGNOSTICS v_count = ROW_COUNT;
  END;

  DROP TABLE pg_temp.mailroom_campaign_recipients;

  -- Every mail just written is above the cursor (this transaction holds the
  -- backlog row, so no chunk moved it): the count operators read grows by
  -- all of them, and each chunk lowers it by what it takes.
  UPDATE mailroom.campaign_backlog SET unqueued = unqueued + v_count WHERE campaign_id = v_c.id;
  -- And the campaign's size (campaign_summaries' total), under the same row.
  INSERT INTO mailroom.campaign_mail_counts AS m (campaign_id, mails) VALUES (v_c.id, v_count)
  ON CONFLICT (campaign_id) DO UPDATE SET mails = m.mails + EXCLUDED.mails;

  IF v_count > 0 AND v_c.status = 'done' THEN
    UPDATE mailroom.campaigns SET status = 'active', finished_at = NULL, updated_at = now() WHERE id = v_c.id;
    v_c.status := 'active';
  END IF;
  -- The first chunk now, so the first mail can be claimed as soon as this
  -- commits (it notifies waiting runners when some of it is due). A paused
  -- campaign's first chunk is queued paused (as all of it was before); its
  -- next chunks wait until it is resumed. A campaign that had mail not
  -- queued yet already has its chunk in the queue: claims queue the next.
  -- (A done campaign is here only when this run added nobody: the chunk
  -- finds nothing and drops the new backlog row.)
  IF v_new_backlog THEN
    PERFORM mailroom._campaign_queue_chunk(v_c.id, mailroom._campaign_chunk_size(), now());
  END IF;
  RETURN v_count;
END
$$;
ALTER FUNCTION mailroom._campaign_fill(bigint) OWNER TO mailroom_owner;
REVOKE ALL ON FUNCTION mailroom._campaign_fill(bigint) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION mailroom._campaign_fill(bigint) TO mailroom_app;
COMMENT ON FUNCTION mailroom._campaign_fill(bigint) IS
  'Internal step 3 of enqueue_campaign: check the staged rows and write their contents rows in one statement (plain first, on a unique violation again with ON CONFLICT DO NOTHING), holding the campaign''s backlog row, then queue the first chunk (malformed or suppressed addresses are finished as cancelled chunk by chunk). Returns how many were added.';

-- SECURITY INVOKER on purpose (see the top of this file): the recipients query
-- runs as the caller. No SET search_path either, so the query resolves names
-- the way the caller's session does; everything here is schema-qualified.
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
  p_stream       text        DEFAULT 'broadcast'
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
                                  p_max_attempts, p_on_ambiguous, p_stream);

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

  PERFORM mailroom._campaign_fill(v_id);
  RETURN v_id;
END
$$;
ALTER FUNCTION mailroom.enqueue_campaign(text, text, text, integer, timestamptz, jsonb, text, time, time, text, jsonb, integer, text, text)
  OWNER TO mailroom_owner;
REVOKE ALL ON FUNCTION mailroom.enqueue_campaign(text, text, text, integer, timestamptz, jsonb, text, time, time, text, jsonb, integer, text, text)
  FROM PUBLIC;
GRANT EXECUTE ON FUNCTION mailroom.enqueue_campaign(text, text, text, integer, timestamptz, jsonb, text, time, time, text, jsonb, integer, text, text)
  TO mailroom_app;
COMMENT ON FUNCTION mailroom.enqueue_campaign(text, text, text, integer, timestamptz, jsonb, text, time, time, text, jsonb, integer, text, text) IS
  'Queue a campaign: p_recipients is a query (run with the CALLER''s rights; SECURITY INVOKER) returning recipient_id, email and optionally vars (jsonb, merged over p_vars) and time_zone (for the send window; default p_time_zone). One INSERT ... SELECT; idempotent on (campaign name, recipient_id). p_stream (default broadcast) is the stream of all its mail. Returns the campaign id.';

COMMIT;
