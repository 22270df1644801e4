-- Deploy mailroom_fleet:campaigns to pg
-- requires: enqueue

-- A fleet campaign is one campaign NAME on every shard (the shards'
-- mailroom.campaigns.name is unique; each shard gives it its own id). Every
-- call here names the campaign by its name:
--   create_campaign   RUN ON ALL: mailroom.enqueue_campaign with no
--                     recipients, which creates it (or finds it) everywhere,
--                     so progress and pause/resume/cancel see every shard;
--   enqueue_campaign  SPLIT over the recipient arrays, each recipient RUN ON
--                     shard_key(its email): the shard mailroom_fleet.enqueue
--                     sends that address's other mail to, where its
--                     suppressions and limits are;
--   campaign_progress, campaign_total: mailroom.campaign_progress on every
--                     shard, and added up;
--   pause_campaign, resume_campaign, cancel_campaign: RUN ON ALL.
--
-- No transaction spans the shards (PL/Proxy runs each shard's part in
-- autocommit): a call that failed on one shard may have committed on the
-- others. Every call is idempotent on the shards (a campaign mails each
-- recipient_id at most once; creating, pausing, resuming or cancelling twice
-- changes nothing more), so the same call run again completes it where it
-- failed and sends nobody twice (docs/fleet.md).

BEGIN;

CREATE FUNCTION mailroom_fleet.upsert_template(p_key text, p_subject text, p_body_text text,
                                               p_body_html text DEFAULT NULL)
RETURNS TABLE (shard text)
LANGUAGE plproxy
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
  CLUSTER 'mailroom_fleet';
  RUN ON ALL;
  SELECT pg_catalog.current_database()::text AS shard
  FROM mailroom.upsert_template(p_key, p_subject, p_body_text, p_body_html) AS t;
$$;
ALTER FUNCTION mailroom_fleet.upsert_template(text, text, text, text) OWNER TO mailroom_fleet_owner;
REVOKE ALL ON FUNCTION mailroom_fleet.upsert_template(text, text, text, text) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION mailroom_fleet.upsert_template(text, text, text, text)
  TO mailroom_fleet_app, mailroom_fleet_operator;
COMMENT ON FUNCTION mailroom_fleet.upsert_template(text, text, text, text) IS
  'mailroom.upsert_template on every shard (a campaign''s template must exist on each): returns the shards that committed it. Idempotent: when it fails, run it again.';

CREATE FUNCTION mailroom_fleet.create_campaign(
  p_name         text,
  p_template     text,
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
RETURNS TABLE (shard text, campaign_id bigint)
LANGUAGE plproxy
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
  CLUSTER 'mailroom_fleet';
  RUN ON ALL;
  SELECT pg_catalog.current_database()::text AS shard,
         mailroom.enqueue_campaign(p_name, p_template,
                                   'SELECT NULL::pg_catalog.text AS recipient_id, NULL::pg_catalog.text AS email WHERE false',
                                   p_priority, p_send_at, p_vars, p_sender, p_window_start, p_window_end,
                                   p_time_zone, p_headers, p_max_attempts, p_on_ambiguous, p_stream) AS campaign_id;
$$;
ALTER FUNCTION mailroom_fleet.create_campaign(text, text, integer, timestamptz, jsonb, text, time, time, text, jsonb, integer, text, text)
  OWNER TO mailroom_fleet_owner;
REVOKE ALL ON FUNCTION mailroom_fleet.create_campaign(text, text, integer, timestamptz, jsonb, text, time, time, text, jsonb, integer, text, text)
  FROM PUBLIC;
GRANT EXECUTE ON FUNCTION mailroom_fleet.create_campaign(text, text, integer, timestamptz, jsonb, text, time, time, text, jsonb, integer, text, text)
  TO mailroom_fleet_app;
COMMENT ON FUNCTION mailroom_fleet.create_campaign(text, text, integer, timestamptz, jsonb, text, time, time, text, jsonb, integer, text, text) IS
  'Create the campaign p_name on every shard (mailroom.enqueue_campaign''s arguments and checks, no recipients): (shard, its id there). A name a shard has already keeps its stored settings (same template and stream or 22023). Idempotent: when it fails, run it again.';

-- The shard's part: its recipients arrive as arrays, which mailroom's
-- enqueue_campaign takes as a query (run with the caller's rights): the
-- query is unnest() over the arrays written as literals.
CREATE FUNCTION mailroom_fleet._enqueue_campaign_split(
  p_name          text,
  p_template      text,
  p_recipient_ids text[],
  p_emails        text[],
  p_recipient_vars jsonb[],
  p_time_zones    text[],
  p_priority      integer,
  p_send_at       timestamptz,
  p_vars          jsonb,
  p_sender        text,
  p_window_start  time,
  p_window_end    time,
  p_time_zone     text,
  p_headers       jsonb,
  p_max_attempts  integer,
  p_on_ambiguous  text,
  p_stream        text
)
RETURNS TABLE (shard text, campaign_id bigint, recipients integer)
LANGUAGE plproxy
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
  CLUSTER 'mailroom_fleet';
  SPLIT p_recipient_ids, p_emails, p_recipient_vars, p_time_zones;
  RUN ON mailroom_fleet.shard_key(p_emails);
  SELECT pg_catalog.current_database()::text AS shard,
         mailroom.enqueue_campaign(
           p_name, p_template,
           pg_catalog.format('SELECT * FROM ROWS FROM (pg_catalog.unnest(%L::pg_catalog.text[]), pg_catalog.unnest(%L::pg_catalog.text[]), pg_catalog.unnest(%L::pg_catalog.jsonb[]), pg_catalog.unnest(%L::pg_catalog.text[])) AS r(recipient_id, email, vars, time_zone)',
                             p_recipient_ids, p_emails, p_recipient_vars, p_time_zones),
           p_priority, p_send_at, p_vars, p_sender, p_window_start, p_window_end,
           p_time_zone, p_headers, p_max_attempts, p_on_ambiguous, p_stream) AS campaign_id,
         pg_catalog.cardinality(p_recipient_ids) AS recipients;
$$;
ALTER FUNCTION mailroom_fleet._enqueue_campaign_split(text, text, text[], text[], jsonb[], text[], integer, timestamptz, jsonb, text, time, time, text, jsonb, integer, text, text)
  OWNER TO mailroom_fleet_owner;
REVOKE ALL ON FUNCTION mailroom_fleet._enqueue_campaign_split(text, text, text[], text[], jsonb[], text[], integer, timestamptz, jsonb, text, time, time, text, jsonb, integer, text, text)
  FROM PUBLIC;
COMMENT ON FUNCTION mailroom_fleet._enqueue_campaign_split(text, text, text[], text[], jsonb[], text[], integer, timestamptz, jsonb, text, time, time, text, jsonb, integer, text, text) IS
  'Internal (enqueue_campaign): the recipients split by shard_key(email), each shard''s part queued by its mailroom.enqueue_campaign.';

CREATE FUNCTION mailroom_fleet.enqueue_campaign(
  p_name           text,
  p_template       text,
  p_recipient_ids  text[],
  p_emails         text[],
  p_recipient_vars jsonb[]     DEFAULT NULL,
  p_time_zones     text[]      DEFAULT NULL,
  p_priority       integer     DEFAULT 0,
  p_send_at        timestamptz DEFAULT NULL,
  p_vars           jsonb       DEFAULT '{}',
  p_sender         text        DEFAULT 'default',
  p_window_start   time        DEFAULT NULL,
  p_window_end     time        DEFAULT NULL,
  p_time_zone      text        DEFAULT 'UTC',
  p_headers        jsonb       DEFAULT '{}',
  p_max_attempts   integer     DEFAULT 5,
  p_on_ambiguous   text        DEFAULT 'retry',
  p_stream         text        DEFAULT 'broadcast'
)
RETURNS TABLE (shard text, campaign_id bigint, recipients integer)
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
  v_n integer := coalesce(cardinality(p_recipient_ids), 0);
BEGIN
  IF p_recipient_ids IS NULL OR p_emails IS NULL THEN
    RAISE EXCEPTION 'mailroom_fleet: recipients: p_recipient_ids and p_emails are required (arrays, one element per recipient)'
      USING ERRCODE = '22023';
  END IF;
  IF array_ndims(p_recipient_ids) > 1 OR array_ndims(p_emails) > 1
     OR array_ndims(p_recipient_vars) > 1 OR array_ndims(p_time_zones) > 1 THEN
    RAISE EXCEPTION 'mailroom_fleet: recipients: the arrays must be one-dimensional' USING ERRCODE = '22023';
  END IF;
  IF cardinality(p_emails) <> v_n
     OR (p_recipient_vars IS NOT NULL AND cardinality(p_recipient_vars) <> v_n)
     OR (p_time_zones IS NOT NULL AND cardinality(p_time_zones) <> v_n) THEN
    RAISE EXCEPTION 'mailroom_fleet: recipients: p_emails, p_recipient_vars and p_time_zones must have one element per recipient id (%), got %, %, %',
      v_n, cardinality(p_emails), coalesce(cardinality(p_recipient_vars)::text, 'NULL'),
      coalesce(cardinality(p_time_zones)::text, 'NULL')
      USING ERRCODE = '22023';
  END IF;
  IF v_n = 0 THEN
    RETURN;   -- nobody to add: create_campaign creates a campaign without recipients
  END IF;
  RETURN QUERY
  SELECT s.shard, s.campaign_id, s.recipients
  FROM mailroom_fleet._enqueue_campaign_split(
         p_name, p_template, p_recipient_ids, p_emails,
         coalesce(p_recipient_vars, array_fill(NULL::jsonb, ARRAY[v_n])),
         coalesce(p_time_zones, array_fill(NULL::text, ARRAY[v_n])),
         p_priority, p_send_at, p_vars, p_sender, p_window_start, p_window_end,
         p_time_zone, p_headers, p_max_attempts, p_on_ambiguous, p_stream) AS s;
END
$$;
ALTER FUNCTION mailroom_fleet.enqueue_campaign(text, text, text[], text[], jsonb[], text[], integer, timestamptz, jsonb, text, time, time, text, jsonb, integer, text, text)
  OWNER TO mailroom_fleet_owner;
REVOKE ALL ON FUNCTION mailroom_fleet.enqueue_campaign(text, text, text[], text[], jsonb[], text[], integer, timestamptz, jsonb, text, time, time, text, jsonb, integer, text, text)
  FROM PUBLIC;
GRANT EXECUTE ON FUNCTION mailroom_fleet.enqueue_campaign(text, text, text[], text[], jsonb[], text[], integer, timestamptz, jsonb, text, time, time, text, jsonb, integer, text, text)
  TO mailroom_fleet_app;
COMMENT ON FUNCTION mailroom_fleet.enqueue_campaign(text, text, text[], text[], jsonb[], text[], integer, timestamptz, jsonb, text, time, time, text, jsonb, integer, text, text) IS
  'Add recipients to the campaign p_name: element i of p_recipient_ids, p_emails (and p_recipient_vars, p_time_zones when given) is one recipient, queued on the shard its email routes to (shard_key, as mailroom_fleet.enqueue) by that shard''s mailroom.enqueue_campaign (same settings and checks; creates the campaign there when missing). Returns (shard, campaign id there, recipients sent there). Idempotent per (name, recipient_id) as long as a recipient_id keeps its email: when it fails, run it again.';

CREATE FUNCTION mailroom_fleet.campaign_progress(p_name text)
RETURNS TABLE (shard text, campaign_id bigint, status text, total bigint, queued bigint, paused bigint,
               sending bigint, sent bigint, failed bigint, cancelled bigint, review bigint,
               sent_last_minute bigint, send_rate_per_second numeric, oldest_queued_age interval,
               eta interval, due bigint, waiting bigint, next_due_at timestamptz, eta_note text)
LANGUAGE plproxy
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
  CLUSTER 'mailroom_fleet';
  RUN ON ALL;
  SELECT pg_catalog.current_database()::text AS shard, p.campaign_id, p.status, p.total, p.queued, p.paused,
         p.sending, p.sent, p.failed, p.cancelled, p.review, p.sent_last_minute, p.send_rate_per_second,
         p.oldest_queued_age, p.eta, p.due, p.waiting, p.next_due_at, p.eta_note
  FROM (SELECT) AS one
  LEFT JOIN mailroom.campaign_progress p ON p.name OPERATOR(pg_catalog.=) p_name;
$$;
ALTER FUNCTION mailroom_fleet.campaign_progress(text) OWNER TO mailroom_fleet_owner;
REVOKE ALL ON FUNCTION mailroom_fleet.campaign_progress(text) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION mailroom_fleet.campaign_progress(text) TO mailroom_fleet_operator, mailroom_fleet_app;
COMMENT ON FUNCTION mailroom_fleet.campaign_progress(text) IS
  'mailroom.campaign_progress of the campaign p_name on every shard: one row per shard (campaign_id and the counts NULL where the shard has no such campaign). Fails when a shard cannot be reached.';

CREATE FUNCTION mailroom_fleet.campaign_total(p_name text)
RETURNS TABLE (shards bigint, shards_with_campaign bigint, statuses jsonb, total numeric, queued numeric,
               paused numeric, sending numeric, sent numeric, failed numeric, cancelled numeric, review numeric,
               sent_last_minute numeric, send_rate_per_second numeric, oldest_queued_age interval, eta interval,
               due numeric, waiting numeric, next_due_at timestamptz)
LANGUAGE sql
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
  SELECT count(*), count(p.campaign_id),
         coalesce((SELECT jsonb_object_agg(s.status, s.n)
                   FROM (SELECT q.status, count(*) AS n FROM mailroom_fleet.campaign_progress(p_name) q
                         WHERE q.campaign_id IS NOT NULL GROUP BY q.status) s), '{}'),
         sum(p.total), sum(p.queued), sum(p.paused), sum(p.sending), sum(p.sent), sum(p.failed),
         sum(p.cancelled), sum(p.review), sum(p.sent_last_minute), sum(p.send_rate_per_second),
         max(p.oldest_queued_age), max(p.eta), sum(p.due), sum(p.waiting), min(p.next_due_at)
  FROM mailroom_fleet.campaign_progress(p_name) p
$$;
ALTER FUNCTION mailroom_fleet.campaign_total(text) OWNER TO mailroom_fleet_owner;
REVOKE ALL ON FUNCTION mailroom_fleet.campaign_total(text) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION mailroom_fleet.campaign_total(text) TO mailroom_fleet_operator, mailroom_fleet_app;
COMMENT ON FUNCTION mailroom_fleet.campaign_total(text) IS
  'The campaign p_name over the fleet in one row: how many shards answered and how many have it, its status on them ({"active": 2, "done": 1}), the counts and rates added up, the oldest queued age and the longest ETA of any shard, the first next_due_at.';

-- One shard's part of pause, resume and cancel: act only where the step
-- applies (a shard whose part of the campaign is done has nothing to pause
-- or cancel; one where it is active has nothing to resume), so the step
-- runs on every shard whatever state each shard's part is in.
CREATE FUNCTION mailroom_fleet._campaign_control(p_name text, p_action text)
RETURNS TABLE (shard text, campaign_id bigint, was text, moved integer)
LANGUAGE plproxy
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
  CLUSTER 'mailroom_fleet';
  RUN ON ALL;
  SELECT pg_catalog.current_database()::text AS shard, k.campaign_id, k.status AS was,
         CASE WHEN p_action OPERATOR(pg_catalog.=) 'pause' AND k.status OPERATOR(pg_catalog.=) 'active'
                THEN mailroom.pause_campaign(k.campaign_id)
              WHEN p_action OPERATOR(pg_catalog.=) 'resume' AND k.status OPERATOR(pg_catalog.=) 'paused'
                THEN mailroom.resume_campaign(k.campaign_id)
              WHEN p_action OPERATOR(pg_catalog.=) 'cancel' AND k.status OPERATOR(pg_catalog.=) ANY ('{active,paused}'::pg_catalog.text[])
                THEN mailroom.cancel_campaign(k.campaign_id)
              WHEN k.campaign_id IS NOT NULL THEN 0 END AS moved
  FROM (SELECT) AS one
  LEFT JOIN mailroom.campaign_lookup(p_name) AS k ON true;
$$;
ALTER FUNCTION mailroom_fleet._campaign_control(text, text) OWNER TO mailroom_fleet_owner;
REVOKE ALL ON FUNCTION mailroom_fleet._campaign_control(text, text) FROM PUBLIC;
COMMENT ON FUNCTION mailroom_fleet._campaign_control(text, text) IS
  'Internal (pause_campaign, resume_campaign, cancel_campaign): the step on every shard where it applies.';

CREATE FUNCTION mailroom_fleet._campaign_step(p_name text, p_action text)
RETURNS TABLE (shard text, campaign_id bigint, was text, moved integer)
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
  v_row   record;
  v_found boolean := false;
BEGIN
  IF p_name IS NULL OR p_name = '' THEN
    RAISE EXCEPTION 'mailroom_fleet: name: a campaign name is required' USING ERRCODE = '22023';
  END IF;
  FOR v_row IN SELECT c.* FROM mailroom_fleet._campaign_control(p_name, p_action) c ORDER BY c.shard LOOP
    shard := v_row.shard;
    campaign_id := v_row.campaign_id;
    was := v_row.was;
    moved := v_row.moved;
    v_found := v_found OR v_row.campaign_id IS NOT NULL;
    RETURN NEXT;
  END LOOP;
  IF NOT v_found THEN
    RAISE EXCEPTION 'mailroom_fleet: name: no shard has a campaign named %', quote_literal(p_name)
      USING ERRCODE = '22023';
  END IF;
END
$$;
ALTER FUNCTION mailroom_fleet._campaign_step(text, text) OWNER TO mailroom_fleet_owner;
REVOKE ALL ON FUNCTION mailroom_fleet._campaign_step(text, text) FROM PUBLIC;
COMMENT ON FUNCTION mailroom_fleet._campaign_step(text, text) IS
  'Internal: _campaign_control, refused (22023) when no shard knows the name.';

CREATE FUNCTION mailroom_fleet.pause_campaign(p_name text)
RETURNS TABLE (shard text, campaign_id bigint, was text, moved integer)
LANGUAGE sql
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$ SELECT * FROM mailroom_fleet._campaign_step(p_name, 'pause') $$;

CREATE FUNCTION mailroom_fleet.resume_campaign(p_name text)
RETURNS TABLE (shard text, campaign_id bigint, was text, moved integer)
LANGUAGE sql
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$ SELECT * FROM mailroom_fleet._campaign_step(p_name, 'resume') $$;

CREATE FUNCTION mailroom_fleet.cancel_campaign(p_name text)
RETURNS TABLE (shard text, campaign_id bigint, was text, moved integer)
LANGUAGE sql
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$ SELECT * FROM mailroom_fleet._campaign_step(p_name, 'cancel') $$;

DO $$
DECLARE
  v_fn text;
BEGIN
  FOREACH v_fn IN ARRAY ARRAY['pause_campaign', 'resume_campaign', 'cancel_campaign'] LOOP
    EXECUTE format('ALTER FUNCTION mailroom_fleet.%I(text) OWNER TO mailroom_fleet_owner', v_fn);
    EXECUTE format('REVOKE ALL ON FUNCTION mailroom_fleet.%I(text) FROM PUBLIC', v_fn);
    EXECUTE format('GRANT EXECUTE ON FUNCTION mailroom_fleet.%I(text) TO mailroom_fleet_app, mailroom_fleet_operator', v_fn);
  END LOOP;
END
$$;
COMMENT ON FUNCTION mailroom_fleet.pause_campaign(text) IS
  'mailroom.pause_campaign of the campaign p_name on every shard where it is active: (shard, its id there, its status before, mail parked). Shards without it or where it is not active are listed with moved 0 (NULL: no such campaign there); 22023 when no shard has it. Idempotent: when it fails, run it again.';
COMMENT ON FUNCTION mailroom_fleet.resume_campaign(text) IS
  'mailroom.resume_campaign of the campaign p_name on every shard where it is paused: (shard, id, status before, mail queued again). Idempotent: when it fails, run it again.';
COMMENT ON FUNCTION mailroom_fleet.cancel_campaign(text) IS
  'mailroom.cancel_campaign of the campaign p_name on every shard where it is active or paused (a shard whose part is done has nothing to cancel): (shard, id, status before, mail cancelled). Idempotent: when it fails, run it again.';

COMMIT;
