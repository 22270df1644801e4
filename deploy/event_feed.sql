-- Deploy mailroom:event_feed to pg
-- requires: split_messages
-- requires: ledger_bounced
-- requires: table_feedback_events
-- requires: streams
-- requires: settings_operations
-- requires: validation
-- requires: set_setting_typed

-- The event feed (docs/events.md): every outcome an application cares about,
-- one row in mailroom.events, written by triggers on the tables the outcomes
-- are written to, so every writer (mark_outcomes, claim_batch's gate, cancel,
-- cancel_campaign, record_feedback, suppress, unsubscribe) feeds it without a
-- change of its own:
--
--   ledger (mailroom.attempts) rows      sent, deferred (a retry), bounced
--                                        (5xx at send time, or reported
--                                        later), failed (given up otherwise),
--                                        cancelled (suppressed, campaign
--                                        cancelled, an operator's cancel)
--   feedback_events rows of a complaint  complained
--   suppressions rows                    unsubscribed (reason unsubscribed),
--                                        suppressed (every other reason)
--
-- Statement-level triggers with transition tables: one INSERT … SELECT per
-- statement whatever its size. A ledger event keeps the mail's id only; its
-- recipient, stream, campaign and sender are read from contents when the
-- event is read (measured: copying them cost the SQL drain a contents probe
-- per mail, bench/event_feed.py). An event of a mail prune has retired
-- shows them NULL.
--
-- The cursor. Ids and xids are handed out before commit, so transactions
-- commit out of their order: a reader that took "id > last id seen" skips
-- an event whose transaction commits after a later id was read. Each event
-- keeps its inserting transaction's id (xid8, pg_current_xact_id()), and the
-- feed is ordered by (xid, id). A reader is handed only events whose
-- transaction is older than its snapshot's xmin: every such transaction has
-- ended, so all of its events are visible and no event can ever appear
-- before that point again. The cursor is "xid-id" of the last event read.
-- The price: a transaction that stays open (anywhere in the cluster) holds
-- the feed back until it ends; queue_stats' open_transactions shows it.

BEGIN;

CREATE TABLE mailroom.events (
  xid           xid8 NOT NULL DEFAULT pg_catalog.pg_current_xact_id(),
  id            bigint GENERATED ALWAYS AS IDENTITY,
  kind          text NOT NULL,
  message_id    bigint,
  address       text,
  stream        text,
  campaign_id   bigint,
  sender        text,
  attempt       integer,
  reason        text,
  smtp_code     smallint,
  smtp_enhanced text,
  detail        text,
  occurred_at   timestamptz NOT NULL DEFAULT now(),
  CONSTRAINT events_pkey PRIMARY KEY (xid, id)
);
ALTER TABLE mailroom.events OWNER TO mailroom_owner;
REVOKE ALL ON mailroom.events FROM PUBLIC;
COMMENT ON TABLE mailroom.events IS
  'The event feed: one row per outcome an application cares about (sent, deferred, bounced, failed, cancelled, complained, unsubscribed, suppressed), written by triggers; read with mailroom.events_since, retired by mailroom.prune_events.';
COMMENT ON COLUMN mailroom.events.xid IS
  'The inserting transaction (pg_current_xact_id()): the feed is ordered by (xid, id) and handed out only below the reader''s snapshot xmin, so no event is skipped when transactions commit out of order.';
COMMENT ON COLUMN mailroom.events.kind IS
  'sent, deferred (a retry is due), bounced (rejected 5xx at send time, or reported later by a DSN or webhook), failed (given up without a permanent rejection), cancelled (reason: suppressed, campaign_cancelled, cancelled, ...), complained, unsubscribed, suppressed (reason: hard_bounce, complaint, manual).';
COMMENT ON COLUMN mailroom.events.stream IS
  'A complaint''s stream; for unsubscribed and suppressed the suppression''s scope (NULL: every stream). NULL on ledger events, as address, campaign_id and sender: events_since reads them from the mail''s contents.';
COMMENT ON COLUMN mailroom.events.detail IS
  'The SMTP reply text, the feedback''s detail, or the suppression''s source.';

-- Erasure (mailroom.forget) finds a person's events by key, not by reading
-- the feed: ledger events by their mail's id, the others by address. The
-- address index costs only the rare events that carry one (complaints,
-- suppressions); the mail id index costs each ledger event one B-tree entry
-- appended near the right edge (measured with bench/event_feed.py, see
-- docs/events.md).
CREATE INDEX events_message_idx ON mailroom.events (message_id) WHERE message_id IS NOT NULL;
CREATE INDEX events_address_idx ON mailroom.events (lower(address)) WHERE address IS NOT NULL;
COMMENT ON INDEX mailroom.events_message_idx IS 'mailroom.forget: the events of a person''s mail.';
COMMENT ON INDEX mailroom.events_address_idx IS 'mailroom.forget: the complaints and suppressions that name a person.';

CREATE FUNCTION mailroom._events_from_ledger()
RETURNS trigger
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = mailroom, pg_temp
AS $$
BEGIN
  -- The mail's recipient, stream, campaign and sender are not copied: the
  -- readers take them from contents (a probe per event read, not per mail
  -- sent: the drain pays for the event row alone).
  INSERT INTO mailroom.events (kind, message_id, attempt, reason, smtp_code, smtp_enhanced, detail, occurred_at)
  SELECT k.kind, n.message_id, n.attempt, coalesce(n.status_reason, n.reported), n.smtp_code, n.smtp_enhanced,
         left(n.smtp_text, 1000), coalesce(n.finished_at, now())
  FROM new_rows n
  CROSS JOIN LATERAL (SELECT CASE
      WHEN n.finished_as = 'sent' THEN 'sent'
      WHEN n.finished_as = 'cancelled' THEN 'cancelled'
      WHEN n.finished_as = 'failed' THEN CASE WHEN n.smtp_code >= 500 THEN 'bounced' ELSE 'failed' END
      WHEN n.outcome = 'bounced' THEN 'bounced'
      WHEN n.outcome = 'retry' AND n.finished_as IS NULL THEN 'deferred'
    END AS kind) k
  WHERE k.kind IS NOT NULL;
  RETURN NULL;
END
$$;
ALTER FUNCTION mailroom._events_from_ledger() OWNER TO mailroom_owner;
REVOKE ALL ON FUNCTION mailroom._events_from_ledger() FROM PUBLIC;
COMMENT ON FUNCTION mailroom._events_from_ledger() IS
  'Trigger: the event of each new ledger row (sent, cancelled, bounced, failed, deferred; none for an ambiguous, expired, stale or released attempt).';
CREATE TRIGGER attempts_events AFTER INSERT ON mailroom.attempts
  REFERENCING NEW TABLE AS new_rows FOR EACH STATEMENT EXECUTE FUNCTION mailroom._events_from_ledger();

CREATE FUNCTION mailroom._events_from_feedback()
RETURNS trigger
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = mailroom, pg_temp
AS $$
BEGIN
  -- Bounces reach the feed through their ledger row and their suppression,
  -- unsubscribes through their suppression: only complaints come from here.
  INSERT INTO mailroom.events (kind, message_id, address, stream, campaign_id, sender, reason, smtp_enhanced,
                               detail, occurred_at)
  SELECT 'complained', n.message_id, n.address, n.stream, n.campaign_id, n.sender, n.source, n.status,
         left(n.detail, 1000), n.received_at
  FROM new_rows n
  WHERE n.kind = 'complaint';
  RETURN NULL;
END
$$;
ALTER FUNCTION mailroom._events_from_feedback() OWNER TO mailroom_owner;
REVOKE ALL ON FUNCTION mailroom._events_from_feedback() FROM PUBLIC;
COMMENT ON FUNCTION mailroom._events_from_feedback() IS
  'Trigger: a complained event for each complaint recorded (record_feedback).';
CREATE TRIGGER feedback_events_events AFTER INSERT ON mailroom.feedback_events
  REFERENCING NEW TABLE AS new_rows FOR EACH STATEMENT EXECUTE FUNCTION mailroom._events_from_feedback();

CREATE FUNCTION mailroom._events_from_suppressions()
RETURNS trigger
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = mailroom, pg_temp
AS $$
BEGIN
  INSERT INTO mailroom.events (kind, address, stream, reason, detail, occurred_at)
  SELECT CASE WHEN n.reason = 'unsubscribed' THEN 'unsubscribed' ELSE 'suppressed' END,
         n.address, n.stream, n.reason, left(n.source, 1000), n.created_at
  FROM new_rows n;
  RETURN NULL;
END
$$;
ALTER FUNCTION mailroom._events_from_suppressions() OWNER TO mailroom_owner;
REVOKE ALL ON FUNCTION mailroom._events_from_suppressions() FROM PUBLIC;
COMMENT ON FUNCTION mailroom._events_from_suppressions() IS
  'Trigger: an unsubscribed or suppressed event for each new suppression (one already there adds none).';
CREATE TRIGGER suppressions_events AFTER INSERT ON mailroom.suppressions
  REFERENCING NEW TABLE AS new_rows FOR EACH STATEMENT EXECUTE FUNCTION mailroom._events_from_suppressions();

-- "xid-id" back to its parts; NULL or '' is the start of the feed.
CREATE FUNCTION mailroom._event_cursor(p_cursor text, OUT xid xid8, OUT id bigint)
LANGUAGE plpgsql IMMUTABLE
SET search_path = mailroom, pg_temp
AS $$
BEGIN
  IF p_cursor IS NULL OR p_cursor = '' THEN
    xid := '0'::xid8;
    id := 0;
    RETURN;
  END IF;
  IF p_cursor !~ '^[0-9]{1,19}-[0-9]{1,18}$' THEN
    RAISE EXCEPTION 'mailroom: cursor: must be a cursor events_since returned (digits-digits), got "%"', left(p_cursor, 60)
      USING ERRCODE = '22023';
  END IF;
  xid := split_part(p_cursor, '-', 1)::xid8;
  id := split_part(p_cursor, '-', 2)::bigint;
END
$$;
ALTER FUNCTION mailroom._event_cursor(text) OWNER TO mailroom_owner;
REVOKE ALL ON FUNCTION mailroom._event_cursor(text) FROM PUBLIC;
COMMENT ON FUNCTION mailroom._event_cursor(text) IS
  'Internal: a feed cursor "xid-id" as its parts (22023 for anything else); NULL or empty: the start.';

CREATE FUNCTION mailroom._event_kinds_check(p_field text, p_kinds text[])
RETURNS void
LANGUAGE plpgsql IMMUTABLE
SET search_path = mailroom, pg_temp
AS $$
DECLARE
  v_bad text;
BEGIN
  SELECT k INTO v_bad FROM unnest(p_kinds) AS k
  WHERE k IS NULL OR k NOT IN ('sent', 'deferred', 'bounced', 'failed', 'cancelled', 'complained', 'unsubscribed', 'suppressed')
  LIMIT 1;
  IF FOUND THEN
    RAISE EXCEPTION 'mailroom: %: unknown event kind "%" (expected sent, deferred, bounced, failed, cancelled, complained, unsubscribed or suppressed)',
      p_field, coalesce(v_bad, 'NULL') USING ERRCODE = '22023';
  END IF;
END
$$;
ALTER FUNCTION mailroom._event_kinds_check(text, text[]) OWNER TO mailroom_owner;
REVOKE ALL ON FUNCTION mailroom._event_kinds_check(text, text[]) FROM PUBLIC;
COMMENT ON FUNCTION mailroom._event_kinds_check(text, text[]) IS
  'Internal: 22023 naming p_field unless every element of p_kinds is an event kind.';

CREATE FUNCTION mailroom.events_since(
  p_cursor   text    DEFAULT NULL,
  p_limit    integer DEFAULT 100,
  p_stream   text    DEFAULT NULL,
  p_campaign bigint  DEFAULT NULL,
  p_sender   text    DEFAULT NULL,
  p_kinds    text[]  DEFAULT NULL
)
RETURNS TABLE (cursor text, event_id bigint, kind text, message_id bigint, address text, stream text,
               campaign_id bigint, sender text, attempt integer, reason text, smtp_code integer,
               smtp_enhanced text, detail text, occurred_at timestamptz)
LANGUAGE plpgsql
STABLE
SECURITY DEFINER
SET search_path = mailroom, pg_temp
AS $$
DECLARE
  v_from record;
BEGIN
  PERFORM mailroom._check_range('limit', p_limit, 1, 10000);
  IF p_kinds IS NOT NULL THEN
    PERFORM mailroom._event_kinds_check('kinds', p_kinds);
  END IF;
  v_from := mailroom._event_cursor(p_cursor);
  -- (STABLE: the function's one snapshot is the query's, so the xmin read
  -- here is the one its rows were read under.)
  RETURN QUERY
  SELECT e.xid::text || '-' || e.id::text, e.id, e.kind, e.message_id, coalesce(e.address, c.to_address),
         coalesce(e.stream, c.stream), coalesce(e.campaign_id, c.campaign_id), coalesce(e.sender, c.sender),
         e.attempt, e.reason, e.smtp_code::integer, e.smtp_enhanced, e.detail, e.occurred_at
  FROM mailroom.events e
  LEFT JOIN mailroom.contents c ON c.id = e.message_id AND e.address IS NULL
  WHERE (e.xid, e.id) > (v_from.xid, v_from.id)
    AND e.xid < pg_catalog.pg_snapshot_xmin(pg_catalog.pg_current_snapshot())
    AND (p_stream IS NULL OR coalesce(e.stream, c.stream) = p_stream)
    AND (p_campaign IS NULL OR coalesce(e.campaign_id, c.campaign_id) = p_campaign)
    AND (p_sender IS NULL OR coalesce(e.sender, c.sender) = p_sender)
    AND (p_kinds IS NULL OR e.kind = ANY (p_kinds))
  ORDER BY e.xid, e.id
  LIMIT p_limit;
END
$$;
ALTER FUNCTION mailroom.events_since(text, integer, text, bigint, text, text[]) OWNER TO mailroom_owner;
REVOKE ALL ON FUNCTION mailroom.events_since(text, integer, text, bigint, text, text[]) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION mailroom.events_since(text, integer, text, bigint, text, text[]) TO mailroom_app, mailroom_operator;
COMMENT ON FUNCTION mailroom.events_since(text, integer, text, bigint, text, text[]) IS
  'The event feed after p_cursor (NULL: from the oldest kept), at most p_limit (1 to 10,000) events in feed order, optionally only one stream, campaign, sender or some kinds; pass the last row''s cursor back. Only events of transactions older than every open one are handed out, so none is ever skipped; an open transaction holds the feed back until it ends.';

CREATE FUNCTION mailroom.events_head()
RETURNS text
LANGUAGE sql
STABLE
SECURITY DEFINER
SET search_path = mailroom, pg_temp
AS $$
  -- Everything below the snapshot's xmin is the past; what is still being
  -- written comes after this cursor.
  SELECT pg_catalog.pg_snapshot_xmin(pg_catalog.pg_current_snapshot())::text || '-0'
$$;
ALTER FUNCTION mailroom.events_head() OWNER TO mailroom_owner;
REVOKE ALL ON FUNCTION mailroom.events_head() FROM PUBLIC;
GRANT EXECUTE ON FUNCTION mailroom.events_head() TO mailroom_app, mailroom_operator;
COMMENT ON FUNCTION mailroom.events_head() IS
  'A cursor at the end of the feed: events_since(events_head()) returns only events written from now on (and those of transactions still open).';

INSERT INTO mailroom.settings (key, value, description) VALUES
  ('event_retention', '30 days',
   'Events of the event feed older than this are retired by mailroom.prune_events (at least 1 day), unless an active webhook endpoint has not had them yet (then up to event_retention_max). A reader further behind loses them.'),
  ('event_retention_max', '60 days',
   'The most an event is kept for an active (not paused) webhook endpoint that has not had it yet: prune_events retires it at this age whoever is behind. A paused endpoint holds nothing.')
ON CONFLICT (key) DO NOTHING;

-- Who must not lose events yet: the oldest cursor a reader the feed keeps
-- events for still stands at, or no row. None here; webhook_delivery
-- replaces it with its active endpoints' oldest cursor.
CREATE FUNCTION mailroom._events_held(OUT xid xid8, OUT id bigint)
RETURNS SETOF record
LANGUAGE sql STABLE
SET search_path = mailroom, pg_temp
AS $$
  SELECT NULL::xid8, NULL::bigint WHERE false
$$;
ALTER FUNCTION mailroom._events_held() OWNER TO mailroom_owner;
REVOKE ALL ON FUNCTION mailroom._events_held() FROM PUBLIC;
COMMENT ON FUNCTION mailroom._events_held() IS
  'Internal (prune_events): the oldest feed cursor a reader still needs the events after, or no row.';

CREATE FUNCTION mailroom._prune_events(p_batch integer DEFAULT NULL, p_now timestamptz DEFAULT now())
RETURNS TABLE (events bigint, batches integer, more boolean)
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = mailroom, pg_temp
AS $$
DECLARE
  v_age         text    := mailroom._setting('event_retention');
  v_age_max     text    := coalesce(mailroom._setting('event_retention_max'), '60 days');
  v_batch       integer := coalesce(p_batch, mailroom._setting('prune_batch_size')::integer, 5000);
  v_max_batches integer := coalesce(mailroom._setting('prune_max_batches')::integer, 20);
  v_cutoff      timestamptz;
  v_cutoff_max  timestamptz;
  v_held        record;
  v_events      bigint  := 0;
  v_batches     integer := 0;
  v_more        boolean := false;
  v_taken       integer;
  v_gone        integer;
BEGIN
  IF p_now IS NULL THEN
    RAISE EXCEPTION 'mailroom: now: must not be NULL' USING ERRCODE = '22023';
  END IF;
  IF p_batch IS NOT NULL THEN
    PERFORM mailroom._check_range('batch', p_batch, 1, 1000000);
  END IF;
  PERFORM mailroom._check_setting('event_retention', v_age);
  PERFORM mailroom._check_setting('event_retention_max', v_age_max);
  PERFORM mailroom._check_range('prune_batch_size', v_batch, 1, 1000000);
  PERFORM mailroom._check_range('prune_max_batches', v_max_batches, 1, 10000);
  v_cutoff := p_now - v_age::interval;
  v_cutoff_max := least(v_cutoff, p_now - v_age_max::interval);
  -- An active webhook endpoint behind keeps what it has not had, up to
  -- event_retention_max (a paused one holds nothing: it may never return).
  SELECT h.xid, h.id INTO v_held FROM mailroom._events_held() h ORDER BY h.xid, h.id LIMIT 1;

  -- The feed's oldest rows by its own key (no index of its own for prune:
  -- every event pays for each B-tree). Each batch takes the first rows and
  -- retires those old enough; a batch that finds a young one stops: the
  -- rest of the feed is younger but for a transaction that ran long.
  FOR i IN 1 .. v_max_batches LOOP
    WITH head AS (
      SELECT e.xid, e.id, e.occurred_at FROM mailroom.events e ORDER BY e.xid, e.id LIMIT v_batch
    ),
    gone AS (
      DELETE FROM mailroom.events e USING head h
      WHERE e.xid = h.xid AND e.id = h.id AND h.occurred_at < v_cutoff
        AND (v_held.xid IS NULL OR (h.xid, h.id) <= (v_held.xid, v_held.id) OR h.occurred_at < v_cutoff_max)
      RETURNING 1
    )
    SELECT (SELECT count(*) FROM head), (SELECT count(*) FROM gone) INTO v_taken, v_gone;
    v_events := v_events + v_gone;
    v_batches := v_batches + 1;
    v_more := v_gone = v_batch AND i = v_max_batches;
    EXIT WHEN v_gone < v_taken OR v_taken < v_batch;
  END LOOP;
  RETURN QUERY SELECT v_events, v_batches, v_more;
END
$$;
ALTER FUNCTION mailroom._prune_events(integer, timestamptz) OWNER TO mailroom_owner;
REVOKE ALL ON FUNCTION mailroom._prune_events(integer, timestamptz) FROM PUBLIC;
COMMENT ON FUNCTION mailroom._prune_events(integer, timestamptz) IS
  'Owner only (tests pin the clock): mailroom.prune_events with the cut-off at p_now minus event_retention (minus event_retention_max for events an active webhook endpoint has not had).';

CREATE FUNCTION mailroom.prune_events(p_batch integer DEFAULT NULL)
RETURNS TABLE (events bigint, batches integer, more boolean)
LANGUAGE sql
SECURITY DEFINER
SET search_path = mailroom, pg_temp
AS $$
  SELECT * FROM mailroom._prune_events(p_batch, now())
$$;
ALTER FUNCTION mailroom.prune_events(integer) OWNER TO mailroom_owner;
REVOKE ALL ON FUNCTION mailroom.prune_events(integer) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION mailroom.prune_events(integer) TO mailroom_operator;
COMMENT ON FUNCTION mailroom.prune_events(integer) IS
  'Retire feed events older than setting event_retention (30 days by default; those an active webhook endpoint has not had yet: event_retention_max, 60 days), oldest first in feed order, in batches of p_batch rows (default: prune_batch_size), at most prune_max_batches per call; more = true when it stopped at that bound.';

DO $$
BEGIN
  IF EXISTS (SELECT FROM pg_catalog.pg_extension WHERE extname = 'pg_cron') THEN
    PERFORM cron.schedule('mailroom-prune-events', '37 * * * *', 'SELECT * FROM mailroom.prune_events()');
  END IF;
END
$$;

COMMIT;
