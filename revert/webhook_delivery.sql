-- Revert mailroom:webhook_delivery from pg: back to v0.5.0, whose
-- webhook_claim does not note the keys runners offer and whose
-- webhook_status has no key_offered_at or warning. The change redefined
-- those two and added webhook_keys_offered; everything else is as in v0.5.0.

BEGIN;

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

DROP VIEW mailroom.webhook_status;
CREATE VIEW mailroom.webhook_status WITH (security_barrier) AS
SELECT w.name, w.url, w.secret_name, w.kinds, w.streams, w.status, w.paused_reason, w.paused_at,
       w.failures, w.max_failures, w.next_attempt_at, w.delivered, w.last_delivered_at, w.last_error,
       w.last_failure_at,
       CASE WHEN w.leased_until > now() THEN w.worker END AS delivering_worker,
       w.cursor_xid::text || '-' || w.cursor_id::text AS cursor,
       -- Up to 10,000 counted: how far behind, without reading the whole feed.
       (SELECT count(*) FROM (SELECT FROM mailroom.events e
                              WHERE (e.xid, e.id) > (w.cursor_xid, w.cursor_id) LIMIT 10000) x) AS events_behind
FROM mailroom.webhook_endpoints w;
ALTER VIEW mailroom.webhook_status OWNER TO mailroom_owner;
REVOKE ALL ON mailroom.webhook_status FROM PUBLIC;
GRANT SELECT ON mailroom.webhook_status TO mailroom_operator;
COMMENT ON VIEW mailroom.webhook_status IS
  'Each webhook endpoint: active or paused (and why), failures in a row, the next try, events delivered, the last error, the runner delivering now, and events_behind (counted up to 10,000, before filters).';

DROP TABLE mailroom.webhook_keys_offered;

COMMIT;
