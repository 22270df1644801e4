-- Deploy mailroom:webhook_delivery to pg
-- requires: event_feed
-- requires: roles
-- requires: validation

-- Webhook endpoints (docs/events.md): the feed POSTed to HTTPS endpoints by
-- the runners. Each endpoint has its own cursor into the feed, claimed with
-- a lease so one runner at a time delivers its next batch, in order. No
-- secret is stored: secret_name names the HMAC key the runners hold (their
-- --webhook-secrets file or MAILROOM_WEBHOOK_SECRETS), and a runner claims
-- only endpoints whose key it has. A run of failures pauses the endpoint
-- (status paused, with the reason) until an operator resumes it.
--
-- Delivery is at least once: a runner that delivered events but lost its
-- lease before reporting (a crash, a lease run out) leaves the cursor where
-- it was, and the next claim sends them again under the same event id.
--
-- An endpoint whose key no runner holds is never claimed: it stays active,
-- falls behind and holds the feed's pruning back (up to
-- event_retention_max) with nothing failing. So webhook_claim notes when a
-- runner last asked with each key name (webhook_keys_offered), and
-- webhook_status warns about an active endpoint whose key nobody offered
-- for five minutes.

BEGIN;

-- Over v0.5.0's tables (this is a rework): IF NOT EXISTS skips them
-- without a notice in the DBA's deploy output.
SET LOCAL client_min_messages = warning;

CREATE TABLE IF NOT EXISTS mailroom.webhook_endpoints (
  name              text PRIMARY KEY,
  url               text NOT NULL,
  secret_name       text NOT NULL,
  kinds             text[],
  streams           text[],
  max_failures      integer NOT NULL DEFAULT 10,
  status            text NOT NULL DEFAULT 'active',
  paused_reason     text,
  paused_at         timestamptz,
  cursor_xid        xid8 NOT NULL,
  cursor_id         bigint NOT NULL,
  failures          integer NOT NULL DEFAULT 0,
  next_attempt_at   timestamptz NOT NULL DEFAULT now(),
  lease_token       uuid,
  leased_until      timestamptz,
  worker            text,
  delivered         bigint NOT NULL DEFAULT 0,
  last_delivered_at timestamptz,
  last_error        text,
  last_failure_at   timestamptz,
  created_at        timestamptz NOT NULL DEFAULT now(),
  CONSTRAINT webhook_endpoints_name_format CHECK (name ~ '^[A-Za-z0-9_.-]{1,64}$'),
  CONSTRAINT webhook_endpoints_url_https CHECK (url ~ '^https://[^/?#@[:space:]]+(/[^[:space:]]*)?$' AND length(url) <= 2000),
  CONSTRAINT webhook_endpoints_secret_name_format CHECK (secret_name ~ '^[A-Za-z0-9_-]{1,16}$'),
  CONSTRAINT webhook_endpoints_status_valid CHECK (status IN ('active', 'paused')),
  CONSTRAINT webhook_endpoints_max_failures_range CHECK (max_failures BETWEEN 1 AND 1000)
);
ALTER TABLE mailroom.webhook_endpoints OWNER TO mailroom_owner;
REVOKE ALL ON mailroom.webhook_endpoints FROM PUBLIC;
COMMENT ON TABLE mailroom.webhook_endpoints IS
  'Where runners POST the event feed: one row per HTTPS endpoint with its filters, its cursor into the feed, its lease and its health. Written by webhook_endpoint_set/pause/resume/delete, webhook_claim and webhook_report only.';
COMMENT ON COLUMN mailroom.webhook_endpoints.secret_name IS
  'The name of the HMAC-SHA256 key that signs this endpoint''s requests, held by the runners (never the key itself).';

CREATE TABLE IF NOT EXISTS mailroom.webhook_keys_offered (
  secret_name text PRIMARY KEY,
  offered_at  timestamptz NOT NULL
);
ALTER TABLE mailroom.webhook_keys_offered OWNER TO mailroom_owner;
REVOKE ALL ON mailroom.webhook_keys_offered FROM PUBLIC;
COMMENT ON TABLE mailroom.webhook_keys_offered IS
  'When a runner last claimed webhook deliveries holding each key name (kept to the minute by webhook_claim): webhook_status''s warning about an endpoint whose key no runner has.';

CREATE OR REPLACE FUNCTION mailroom.webhook_endpoint_set(
  p_name         text,
  p_url          text,
  p_secret_name  text,
  p_kinds        text[]  DEFAULT NULL,
  p_streams      text[]  DEFAULT NULL,
  p_max_failures integer DEFAULT 10,
  p_from_start   boolean DEFAULT false
)
RETURNS void
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = mailroom, pg_temp
AS $$
DECLARE
  v_from record;
BEGIN
  IF p_name IS NULL OR p_name !~ '^[A-Za-z0-9_.-]{1,64}$' THEN
    RAISE EXCEPTION 'mailroom: name: 1 to 64 of A-Z a-z 0-9 _ . -, got "%"', left(p_name, 80) USING ERRCODE = '22023';
  END IF;
  IF p_url IS NULL OR length(p_url) > 2000 OR p_url !~ '^https://[^/?#@[:space:]]+(/[^[:space:]]*)?$' THEN
    RAISE EXCEPTION 'mailroom: url: must be an https:// URL without credentials, at most 2,000 characters'
      USING ERRCODE = '22023';
  END IF;
  IF p_secret_name IS NULL OR p_secret_name !~ '^[A-Za-z0-9_-]{1,16}$' THEN
    RAISE EXCEPTION 'mailroom: secret_name: the name of a key the runners hold, 1 to 16 of A-Z a-z 0-9 _ -, got "%"',
      left(p_secret_name, 40) USING ERRCODE = '22023', HINT = 'The secret itself never goes into the database.';
  END IF;
  IF p_kinds IS NOT NULL THEN
    PERFORM mailroom._event_kinds_check('kinds', p_kinds);
  END IF;
  IF p_streams IS NOT NULL AND EXISTS (SELECT FROM unnest(p_streams) s WHERE NOT EXISTS (SELECT FROM mailroom.streams t WHERE t.name = s)) THEN
    RAISE EXCEPTION 'mailroom: streams: unknown stream "%"',
      (SELECT s FROM unnest(p_streams) s WHERE NOT EXISTS (SELECT FROM mailroom.streams t WHERE t.name = s) LIMIT 1)
      USING ERRCODE = '22023';
  END IF;
  PERFORM mailroom._check_range('max_failures', p_max_failures, 1, 1000);
  IF p_from_start IS NULL THEN
    RAISE EXCEPTION 'mailroom: from_start: must not be NULL' USING ERRCODE = '22023';
  END IF;
  v_from := mailroom._event_cursor(CASE WHEN p_from_start THEN NULL ELSE mailroom.events_head() END);
  -- A new endpoint starts at the end of the feed (or its start); a changed
  -- one keeps its cursor and its health.
  INSERT INTO mailroom.webhook_endpoints (name, url, secret_name, kinds, streams, max_failures, cursor_xid, cursor_id)
  VALUES (p_name, p_url, p_secret_name, p_kinds, p_streams, p_max_failures, v_from.xid, v_from.id)
  ON CONFLICT (name) DO UPDATE
  SET url = EXCLUDED.url, secret_name = EXCLUDED.secret_name, kinds = EXCLUDED.kinds, streams = EXCLUDED.streams,
      max_failures = EXCLUDED.max_failures;
END
$$;
ALTER FUNCTION mailroom.webhook_endpoint_set(text, text, text, text[], text[], integer, boolean) OWNER TO mailroom_owner;
REVOKE ALL ON FUNCTION mailroom.webhook_endpoint_set(text, text, text, text[], text[], integer, boolean) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION mailroom.webhook_endpoint_set(text, text, text, text[], text[], integer, boolean) TO mailroom_operator;
COMMENT ON FUNCTION mailroom.webhook_endpoint_set(text, text, text, text[], text[], integer, boolean) IS
  'Add or change a webhook endpoint: its https URL, the name of the runners'' key that signs for it, the event kinds and streams it wants (NULL: all), how many failures in a row pause it. A new endpoint gets the events from now on (p_from_start: every event kept); a changed one keeps its cursor.';

CREATE OR REPLACE FUNCTION mailroom.webhook_endpoint_pause(p_name text)
RETURNS void
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = mailroom, pg_temp
AS $$
BEGIN
  UPDATE mailroom.webhook_endpoints
  SET status = 'paused', paused_reason = 'paused by an operator', paused_at = now()
  WHERE name = p_name;
  IF NOT FOUND THEN
    RAISE EXCEPTION 'mailroom: name: no webhook endpoint "%"', left(p_name, 80) USING ERRCODE = '22023';
  END IF;
END
$$;
ALTER FUNCTION mailroom.webhook_endpoint_pause(text) OWNER TO mailroom_owner;
REVOKE ALL ON FUNCTION mailroom.webhook_endpoint_pause(text) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION mailroom.webhook_endpoint_pause(text) TO mailroom_operator;
COMMENT ON FUNCTION mailroom.webhook_endpoint_pause(text) IS
  'Stop delivering to an endpoint; its cursor stays, so resume delivers what came meanwhile (as long as event_retention keeps it).';

CREATE OR REPLACE FUNCTION mailroom.webhook_endpoint_resume(p_name text)
RETURNS void
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = mailroom, pg_temp
AS $$
BEGIN
  UPDATE mailroom.webhook_endpoints
  SET status = 'active', paused_reason = NULL, paused_at = NULL, failures = 0, next_attempt_at = now()
  WHERE name = p_name;
  IF NOT FOUND THEN
    RAISE EXCEPTION 'mailroom: name: no webhook endpoint "%"', left(p_name, 80) USING ERRCODE = '22023';
  END IF;
END
$$;
ALTER FUNCTION mailroom.webhook_endpoint_resume(text) OWNER TO mailroom_owner;
REVOKE ALL ON FUNCTION mailroom.webhook_endpoint_resume(text) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION mailroom.webhook_endpoint_resume(text) TO mailroom_operator;
COMMENT ON FUNCTION mailroom.webhook_endpoint_resume(text) IS
  'Deliver to a paused endpoint again, from where it stopped, its failure count reset.';

CREATE OR REPLACE FUNCTION mailroom.webhook_endpoint_delete(p_name text)
RETURNS void
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = mailroom, pg_temp
AS $$
BEGIN
  DELETE FROM mailroom.webhook_endpoints WHERE name = p_name;
  IF NOT FOUND THEN
    RAISE EXCEPTION 'mailroom: name: no webhook endpoint "%"', left(p_name, 80) USING ERRCODE = '22023';
  END IF;
END
$$;
ALTER FUNCTION mailroom.webhook_endpoint_delete(text) OWNER TO mailroom_owner;
REVOKE ALL ON FUNCTION mailroom.webhook_endpoint_delete(text) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION mailroom.webhook_endpoint_delete(text) TO mailroom_operator;
COMMENT ON FUNCTION mailroom.webhook_endpoint_delete(text) IS 'Forget a webhook endpoint and its cursor.';

CREATE OR REPLACE FUNCTION mailroom.webhook_claim(
  p_worker    text,
  p_secrets   text[],
  p_endpoints integer  DEFAULT 4,
  p_batch     integer  DEFAULT 100,
  p_lease     interval DEFAULT '60 seconds'
)
RETURNS TABLE (endpoint text, url text, secret_name text, lease_token uuid, failures integer, batch_end text,
               events jsonb)
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = mailroom, pg_temp
AS $$
DECLARE
  v_ep      record;
  v_token   uuid;
  v_events  jsonb;
  v_end_xid xid8;
  v_end_id  bigint;
BEGIN
  IF p_worker IS NULL OR length(p_worker) NOT BETWEEN 1 AND 200 THEN
    RAISE EXCEPTION 'mailroom: worker: 1 to 200 characters' USING ERRCODE = '22023';
  END IF;
  PERFORM mailroom._check_range('endpoints', p_endpoints, 1, 100);
  PERFORM mailroom._check_range('batch', p_batch, 1, 1000);
  IF p_lease IS NULL OR p_lease < interval '1 second' OR p_lease > interval '1 hour' THEN
    RAISE EXCEPTION 'mailroom: lease: must be between 1 second and 1 hour' USING ERRCODE = '22023';
  END IF;
  -- A read first: the row is written at most once a minute per key, not on
  -- every poll of every runner.
  IF EXISTS (SELECT FROM unnest(p_secrets) AS k(name)
             WHERE NOT EXISTS (SELECT FROM mailroom.webhook_keys_offered o
                               WHERE o.secret_name = k.name AND o.offered_at > now() - interval '1 minute')) THEN
    INSERT INTO mailroom.webhook_keys_offered AS o (secret_name, offered_at)
    SELECT DISTINCT k.name, now() FROM unnest(p_secrets) AS k(name)
    WHERE k.name ~ '^[A-Za-z0-9_-]{1,16}$'
    ON CONFLICT ON CONSTRAINT webhook_keys_offered_pkey DO UPDATE SET offered_at = EXCLUDED.offered_at
      WHERE o.offered_at <= now() - interval '1 minute';
  END IF;
  FOR v_ep IN
    SELECT w.name, w.url, w.secret_name, w.kinds, w.streams, w.failures, w.cursor_xid, w.cursor_id
    FROM mailroom.webhook_endpoints w
    WHERE w.status = 'active' AND w.secret_name = ANY (p_secrets) AND w.next_attempt_at <= now()
      AND (w.leased_until IS NULL OR w.leased_until < now())
    ORDER BY w.next_attempt_at
    LIMIT p_endpoints
    FOR UPDATE SKIP LOCKED
  LOOP
    -- The next events of the feed (up to ten batches read, at most one
    -- batch handed out): the batch ends at its last event, or where the
    -- reading stopped when fewer matched, so events the endpoint does not
    -- want are passed over once, never read again. The horizon is the one
    -- of events_since, in this one statement's snapshot.
    WITH scanned AS (
      SELECT e.xid, e.id, e.kind, e.message_id, coalesce(e.address, c.to_address) AS address,
             coalesce(e.stream, c.stream) AS stream, coalesce(e.campaign_id, c.campaign_id) AS campaign_id,
             coalesce(e.sender, c.sender) AS sender, e.attempt, e.reason, e.smtp_code, e.smtp_enhanced, e.detail,
             e.occurred_at
      FROM mailroom.events e
      LEFT JOIN mailroom.contents c ON c.id = e.message_id AND e.address IS NULL
      WHERE (e.xid, e.id) > (v_ep.cursor_xid, v_ep.cursor_id)
        AND e.xid < pg_catalog.pg_snapshot_xmin(pg_catalog.pg_current_snapshot())
      ORDER BY e.xid, e.id
      LIMIT p_batch * 10
    ),
    wanted AS (
      SELECT s.*, row_number() OVER (ORDER BY s.xid, s.id) AS n FROM scanned s
      WHERE (v_ep.kinds IS NULL OR s.kind = ANY (v_ep.kinds))
        AND (v_ep.streams IS NULL OR s.stream = ANY (v_ep.streams))
    ),
    batch AS (SELECT * FROM wanted WHERE n <= p_batch),
    last_read AS (
      SELECT b.xid, b.id FROM batch b WHERE (SELECT count(*) FROM batch) = p_batch ORDER BY b.xid DESC, b.id DESC LIMIT 1
    ),
    last_scanned AS (SELECT s.xid, s.id FROM scanned s ORDER BY s.xid DESC, s.id DESC LIMIT 1)
    SELECT (SELECT jsonb_agg(jsonb_build_object(
              'id', b.id, 'cursor', b.xid::text || '-' || b.id::text, 'kind', b.kind, 'message_id', b.message_id,
              'address', b.address, 'stream', b.stream, 'campaign_id', b.campaign_id, 'sender', b.sender,
              'attempt', b.attempt, 'reason', b.reason, 'smtp_code', b.smtp_code, 'smtp_enhanced', b.smtp_enhanced,
              'detail', b.detail, 'occurred_at', b.occurred_at) ORDER BY b.xid, b.id) FROM batch b),
           coalesce((SELECT l.xid FROM last_read l), (SELECT l.xid FROM last_scanned l)),
           coalesce((SELECT l.id FROM last_read l), (SELECT l.id FROM last_scanned l))
      INTO v_events, v_end_xid, v_end_id;
    CONTINUE WHEN v_end_xid IS NULL;    -- nothing new
    IF v_events IS NULL THEN
      -- Nothing it wants: move past what was read, no lease needed.
      UPDATE mailroom.webhook_endpoints w SET cursor_xid = v_end_xid, cursor_id = v_end_id WHERE w.name = v_ep.name;
      CONTINUE;
    END IF;
    v_token := gen_random_uuid();
    UPDATE mailroom.webhook_endpoints w
    SET lease_token = v_token, leased_until = now() + p_lease, worker = p_worker
    WHERE w.name = v_ep.name;
    endpoint := v_ep.name;
    url := v_ep.url;
    secret_name := v_ep.secret_name;
    lease_token := v_token;
    failures := v_ep.failures;
    batch_end := v_end_xid::text || '-' || v_end_id::text;
    events := v_events;
    RETURN NEXT;
  END LOOP;
END
$$;
ALTER FUNCTION mailroom.webhook_claim(text, text[], integer, integer, interval) OWNER TO mailroom_owner;
REVOKE ALL ON FUNCTION mailroom.webhook_claim(text, text[], integer, integer, interval) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION mailroom.webhook_claim(text, text[], integer, integer, interval) TO mailroom_runner;
COMMENT ON FUNCTION mailroom.webhook_claim(text, text[], integer, integer, interval) IS
  'Runners: lease up to p_endpoints active, due endpoints whose key is among p_secrets, each with its next batch of at most p_batch events (in feed order, its filters applied) and the cursor the batch ends at. An endpoint another runner holds is skipped.';

CREATE OR REPLACE FUNCTION mailroom.webhook_report(
  p_endpoint     text,
  p_lease_token  uuid,
  p_through      text,
  p_delivered    integer,
  p_error        text     DEFAULT NULL,
  p_retry_in     interval DEFAULT NULL
)
RETURNS text
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = mailroom, pg_temp
AS $$
DECLARE
  v_through record;
  v_status  text;
BEGIN
  PERFORM mailroom._check_range('delivered', p_delivered, 0, 1000);
  IF p_error IS NOT NULL AND (p_retry_in IS NULL OR p_retry_in < interval '0' OR p_retry_in > interval '1 day') THEN
    RAISE EXCEPTION 'mailroom: retry_in: with an error, between 0 and 1 day' USING ERRCODE = '22023';
  END IF;
  v_through := mailroom._event_cursor(p_through);
  -- The lease names the runner that may move the cursor; a report after
  -- the lease was lost changes nothing (its events go again: at least once).
  UPDATE mailroom.webhook_endpoints w
  SET cursor_xid = CASE WHEN p_through IS NULL THEN w.cursor_xid ELSE greatest(w.cursor_xid, v_through.xid) END,
      cursor_id = CASE WHEN p_through IS NULL OR (w.cursor_xid, w.cursor_id) >= (v_through.xid, v_through.id) THEN w.cursor_id
                       ELSE v_through.id END,
      delivered = w.delivered + p_delivered,
      last_delivered_at = CASE WHEN p_delivered > 0 THEN now() ELSE w.last_delivered_at END,
      failures = CASE WHEN p_error IS NULL THEN 0 WHEN p_delivered > 0 THEN 1 ELSE w.failures + 1 END,
      last_error = CASE WHEN p_error IS NULL THEN w.last_error ELSE left(p_error, 500) END,
      last_failure_at = CASE WHEN p_error IS NULL THEN w.last_failure_at ELSE now() END,
      next_attempt_at = CASE WHEN p_error IS NULL THEN now() ELSE now() + p_retry_in END,
      status = CASE WHEN p_error IS NOT NULL
                     AND (CASE WHEN p_delivered > 0 THEN 1 ELSE w.failures + 1 END) >= w.max_failures
                    THEN 'paused' ELSE w.status END,
      paused_reason = CASE WHEN p_error IS NOT NULL
                            AND (CASE WHEN p_delivered > 0 THEN 1 ELSE w.failures + 1 END) >= w.max_failures
                           THEN format('%s failures in a row; the last: %s', w.max_failures, left(p_error, 300))
                           ELSE w.paused_reason END,
      paused_at = CASE WHEN p_error IS NOT NULL
                        AND (CASE WHEN p_delivered > 0 THEN 1 ELSE w.failures + 1 END) >= w.max_failures
                       THEN now() ELSE w.paused_at END,
      lease_token = NULL, leased_until = NULL, worker = NULL
  WHERE w.name = p_endpoint AND w.lease_token = p_lease_token
  RETURNING w.status INTO v_status;
  RETURN coalesce(v_status, 'lost');
END
$$;
ALTER FUNCTION mailroom.webhook_report(text, uuid, text, integer, text, interval) OWNER TO mailroom_owner;
REVOKE ALL ON FUNCTION mailroom.webhook_report(text, uuid, text, integer, text, interval) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION mailroom.webhook_report(text, uuid, text, integer, text, interval) TO mailroom_runner;
COMMENT ON FUNCTION mailroom.webhook_report(text, uuid, text, integer, text, interval) IS
  'Runners: the end of a delivery under a lease: the cursor moves to p_through (the last event the endpoint took, or the batch''s end), p_delivered counts; with p_error the next try is p_retry_in away and max_failures in a row pause the endpoint. Returns the endpoint''s status, or lost when the lease is no longer this runner''s (nothing changed).';

-- prune_events keeps what an active endpoint has not had yet (up to
-- event_retention_max); a paused one holds nothing, or a dead endpoint
-- would keep the whole feed.
CREATE OR REPLACE FUNCTION mailroom._events_held(OUT xid xid8, OUT id bigint)
RETURNS SETOF record
LANGUAGE sql STABLE
SET search_path = mailroom, pg_temp
AS $$
  SELECT w.cursor_xid, w.cursor_id FROM mailroom.webhook_endpoints w
  WHERE w.status = 'active'
  ORDER BY w.cursor_xid, w.cursor_id
  LIMIT 1
$$;
COMMENT ON FUNCTION mailroom._events_held() IS
  'Internal (prune_events): the oldest cursor of an active webhook endpoint, or no row.';

CREATE OR REPLACE VIEW mailroom.webhook_status WITH (security_barrier) AS
SELECT w.name, w.url, w.secret_name, w.kinds, w.streams, w.status, w.paused_reason, w.paused_at,
       w.failures, w.max_failures, w.next_attempt_at, w.delivered, w.last_delivered_at, w.last_error,
       w.last_failure_at,
       CASE WHEN w.leased_until > now() THEN w.worker END AS delivering_worker,
       w.cursor_xid::text || '-' || w.cursor_id::text AS cursor,
       -- Up to 10,000 counted: how far behind, without reading the whole feed.
       (SELECT count(*) FROM (SELECT FROM mailroom.events e
                              WHERE (e.xid, e.id) > (w.cursor_xid, w.cursor_id) LIMIT 10000) x) AS events_behind,
       o.offered_at AS key_offered_at,
       CASE WHEN w.status = 'active' AND (o.offered_at IS NULL OR o.offered_at < now() - interval '5 minutes')
            THEN format('no runner has offered the key %s %s: start a runner with it in --webhook-secrets',
                        w.secret_name, coalesce('since ' || to_char(o.offered_at AT TIME ZONE 'UTC', 'YYYY-MM-DD HH24:MI "UTC"'), 'yet'))
       END AS warning
FROM mailroom.webhook_endpoints w
LEFT JOIN mailroom.webhook_keys_offered o ON o.secret_name = w.secret_name;
ALTER VIEW mailroom.webhook_status OWNER TO mailroom_owner;
REVOKE ALL ON mailroom.webhook_status FROM PUBLIC;
GRANT SELECT ON mailroom.webhook_status TO mailroom_operator;
COMMENT ON VIEW mailroom.webhook_status IS
  'Each webhook endpoint: active or paused (and why), failures in a row, the next try, events delivered, the last error, the runner delivering now, events_behind (counted up to 10,000, before filters), when a runner last offered the endpoint''s key (key_offered_at) and a warning when no runner offered it for 5 minutes while the endpoint is active.';

COMMIT;
