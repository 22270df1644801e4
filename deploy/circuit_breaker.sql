-- Deploy mailroom:circuit_breaker to pg
-- requires: table_breaker
-- requires: table_breaker_tallies
-- requires: split_messages

-- The circuit breaker (issue 16): a campaign or a sender whose rolling
-- hard-bounce or complaint rate reaches its pause threshold is paused
-- automatically, with the reason and the figures kept in breaker_trips.
--
-- Counting delivered mail (every mark_outcomes) takes no lock another
-- reporter waits for and looks nothing up: the report inserts its delivered
-- mail into breaker_pending, one row per sender and campaign from the
-- queue rows it deleted, and breaker_fold adds those up later (in the folding
-- backend's own rows of breaker_delivered; see table_breaker_tallies),
-- whenever a bad event is evaluated, in the report whose pending rows pass
-- a multiple of 200, and every minute (pg_cron). Only a bad event can raise
-- a rate, so only a bad event evaluates: a synchronous 5.1.x in
-- mark_outcomes, or a bounce or complaint reported later (the insert into
-- feedback_events: see breaker_feedback). It locks its campaign's or
-- sender's row in breaker_counts, records itself at the delivered count it
-- sees, and evaluates the window from there.
--
-- Why no trip is missed. (1) Bad events of one campaign or sender take
-- turns on that row, which each holds to its commit, and each reads the
-- counts in statements that start after it holds the row (READ COMMITTED:
-- a fresh snapshot per statement): every bad event sees every earlier one,
-- so of bad events that together pass a threshold the last to evaluate
-- sees them all and trips. (2) Delivered mail is seen by every bad event
-- that evaluates after its report committed: a bad event counts what is
-- folded and what is still pending, in one statement. One still in flight is not
-- seen; in the old design, where delivered mail locked the same row, it
-- would have waited behind the bad event and been counted after it: the
-- same order, so a bad event here sees exactly what it would have seen
-- there in some serial order of the reports. Not seeing it can only raise
-- the rate the bad event computes (a smaller denominator), or keep the
-- window under the minimum sample, in which case the next bad event, which
-- sees it, decides, as before. (3) Nothing is lost or counted twice: a fold
-- deletes pending rows (skipping those another fold holds) and adds their
-- count in the same statement, so any snapshot sees a mail either pending
-- or folded; the same holds when a gone backend's row is added to
-- breaker_counts.delivered_offset. Never on too few mails: no trip while the
-- window holds fewer than min_sample delivered mails.
--
-- The window is the last N delivered mails, exactly: a bad event is
-- counted while its position (the delivered count when it was evaluated)
-- is past total - N. The pause is one UPDATE of the campaign's status (the
-- claim gate parks its mail) or one row in sender_pauses (the gate parks
-- the sender's mail). Nothing else stops: other campaigns and senders go
-- on.

BEGIN;

-- Delivered mail of one campaign or sender not folded yet: a sum over
-- what was reported since the last fold (a bad event folds first; the
-- pg_cron job folds every minute).
CREATE FUNCTION mailroom._breaker_pending_count(p_scope text, p_key text)
RETURNS bigint
LANGUAGE sql STABLE
SECURITY DEFINER
SET search_path = mailroom, pg_temp
AS $$
  SELECT coalesce(sum(p.delivered), 0)::bigint
  FROM mailroom.breaker_pending p
  WHERE CASE p_scope WHEN 'sender' THEN p.sender = p_key ELSE p.campaign_id::text = p_key END
$$;
ALTER FUNCTION mailroom._breaker_pending_count(text, text) OWNER TO mailroom_owner;
REVOKE ALL ON FUNCTION mailroom._breaker_pending_count(text, text) FROM PUBLIC;
COMMENT ON FUNCTION mailroom._breaker_pending_count(text, text) IS
  'Internal: delivered mail of one campaign or sender still in breaker_pending (not folded yet).';

CREATE FUNCTION mailroom.breaker_fold()
RETURNS bigint
LANGUAGE sql
SECURITY DEFINER
SET search_path = mailroom, pg_temp
-- Never JIT-compiled: a stale estimate of breaker_pending can make a tiny
-- fold look costly enough for it (seconds).
SET jit = off
AS $$
  -- Pending rows another fold holds are skipped (they stay visible, and
  -- counted as pending, until that fold commits): no fold waits for
  -- another, and none counts a mail twice.
  WITH taken AS (
    DELETE FROM mailroom.breaker_pending p
    WHERE p.ctid IN (SELECT q.ctid FROM mailroom.breaker_pending q FOR UPDATE SKIP LOCKED)
    RETURNING p.sender, p.campaign_id, p.delivered
  ),
  counted AS (
    INSERT INTO mailroom.breaker_delivered AS d (scope, key, backend_pid, delivered, updated_at)
    SELECT x.scope, x.key, pg_backend_pid(), sum(t.delivered), now()
    FROM taken t
    CROSS JOIN LATERAL (VALUES ('sender', t.sender), ('campaign', t.campaign_id::text)) AS x(scope, key)
    WHERE x.key IS NOT NULL
    GROUP BY x.scope, x.key
    ON CONFLICT (scope, key, backend_pid) DO UPDATE
    SET delivered = d.delivered + EXCLUDED.delivered, updated_at = EXCLUDED.updated_at
  )
  SELECT coalesce(sum(t.delivered), 0)::bigint FROM taken t
$$;
ALTER FUNCTION mailroom.breaker_fold() OWNER TO mailroom_owner;
REVOKE ALL ON FUNCTION mailroom.breaker_fold() FROM PUBLIC;
GRANT EXECUTE ON FUNCTION mailroom.breaker_fold() TO mailroom_operator;
COMMENT ON FUNCTION mailroom.breaker_fold() IS
  'Count the delivered mail reports left in breaker_pending against its campaigns and senders (breaker_delivered); returns how many mails. Run by every bad event the circuit breaker evaluates, by the report whose pending rows pass a multiple of 200, and by the pg_cron job mailroom-breaker-fold every minute; waits for nothing (what another fold holds is skipped).';

-- Windowed figures of one campaign or sender, from its counts as this
-- statement sees them. The same arithmetic is written out in breaker_status.
CREATE FUNCTION mailroom._breaker_figures(p_scope text, p_key text, p_window integer)
RETURNS TABLE (total bigint, delivered numeric, bounced numeric, complained numeric, bounce_rate numeric,
               complaint_rate numeric)
LANGUAGE sql STABLE
SECURITY DEFINER
SET search_path = mailroom, pg_temp
AS $$
  SELECT t.total, w.d, w.b, w.c,
         CASE WHEN w.d > 0 THEN round(w.b / w.d, 6) ELSE 0 END,
         CASE WHEN w.d > 0 THEN round(w.c / w.d, 6) ELSE 0 END
  FROM (SELECT coalesce((SELECT k.delivered_offset FROM mailroom.breaker_counts k
                         WHERE k.scope = p_scope AND k.key = p_key), 0)
             + coalesce((SELECT sum(d.delivered) FROM mailroom.breaker_delivered d
                         WHERE d.scope = p_scope AND d.key = p_key), 0)
             + mailroom._breaker_pending_count(p_scope, p_key) AS total) AS t
  CROSS JOIN LATERAL (
    SELECT round(least(greatest(t.total, 0), p_window), 2) AS d,
           round(coalesce(sum(e.bounced), 0), 2) AS b,
           round(coalesce(sum(e.complained), 0), 2) AS c
    FROM mailroom.breaker_bad_events e
    WHERE e.scope = p_scope AND e.key = p_key AND e.at_delivered > t.total - p_window
  ) AS w
$$;
ALTER FUNCTION mailroom._breaker_figures(text, text, integer) OWNER TO mailroom_owner;
REVOKE ALL ON FUNCTION mailroom._breaker_figures(text, text, integer) FROM PUBLIC;
COMMENT ON FUNCTION mailroom._breaker_figures(text, text, integer) IS
  'Internal: one campaign''s or sender''s delivered count since its last resume (total), and over its last p_window delivered mails the delivered, bounced and complained mail and the two rates.';

CREATE FUNCTION mailroom._breaker_tally(
  p_scope      text,
  p_key        text,
  p_delivered  integer,
  p_bounced    integer,
  p_complained integer,
  p_now        timestamptz
)
RETURNS boolean
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = mailroom, pg_temp
SET jit = off  -- as breaker_fold: small lookups, never worth compiling
AS $$
DECLARE
  v_set    mailroom.breaker_settings%ROWTYPE;
  v_fig    record;
  v_reason text;
  v_paused boolean := false;
BEGIN
  IF p_delivered > 0 THEN
    -- This backend's own row: no other transaction updates it while this one runs.
    INSERT INTO mailroom.breaker_delivered AS d (scope, key, backend_pid, delivered, updated_at)
    VALUES (p_scope, p_key, pg_backend_pid(), p_delivered, p_now)
    ON CONFLICT (scope, key, backend_pid) DO UPDATE
    SET delivered = d.delivered + EXCLUDED.delivered, updated_at = EXCLUDED.updated_at;
  END IF;
  -- Only a bad event can raise a rate: a delivered mail never evaluates.
  IF p_bounced = 0 AND p_complained = 0 THEN
    RETURN false;
  END IF;

  -- Bad events of this campaign or sender take turns from here to commit
  -- (see the header: why no trip is missed). Every statement below starts
  -- after this row is held, so it sees every bad event before this one.
  INSERT INTO mailroom.breaker_counts AS k (scope, key, updated_at)
  VALUES (p_scope, p_key, p_now)
  ON CONFLICT (scope, key) DO UPDATE SET updated_at = EXCLUDED.updated_at;
  SELECT * INTO STRICT v_set FROM mailroom.breaker_settings WHERE scope = p_scope;
  -- What was reported since the last fold: the window below then looks up
  -- only what another fold holds or what committed after this statement.
  PERFORM mailroom.breaker_fold();

  -- Fold the rows of backends that are gone into the offset, so the sum
  -- stays short: the count moves in the statement that deletes the row. A
  -- row whose backend is reporting right now is locked and skipped (and a
  -- live backend's row folded by mistake, its pid not yet in this
  -- transaction's view of pg_stat_activity, loses nothing either).
  WITH gone AS (
    DELETE FROM mailroom.breaker_delivered d
    WHERE d.scope = p_scope AND d.key = p_key
      AND d.backend_pid IN (SELECT g.backend_pid FROM mailroom.breaker_delivered g
                            WHERE g.scope = p_scope AND g.key = p_key
                              AND g.backend_pid NOT IN (SELECT a.pid FROM pg_stat_activity a WHERE a.pid IS NOT NULL)
                            FOR UPDATE SKIP LOCKED)
    RETURNING d.delivered
  )
  UPDATE mailroom.breaker_counts k
  SET delivered_offset = k.delivered_offset + (SELECT sum(g.delivered) FROM gone g)
  WHERE k.scope = p_scope AND k.key = p_key AND EXISTS (SELECT FROM gone);

  -- This event at its position, then the window from there (events it has
  -- passed are forgotten).
  INSERT INTO mailroom.breaker_bad_events (scope, key, at_delivered, bounced, complained, recorded_at)
  SELECT p_scope, p_key, f.total, p_bounced, p_complained, p_now
  FROM mailroom._breaker_figures(p_scope, p_key, v_set.window_size) AS f;
  SELECT * INTO v_fig FROM mailroom._breaker_figures(p_scope, p_key, v_set.window_size);
  DELETE FROM mailroom.breaker_bad_events e
  WHERE e.scope = p_scope AND e.key = p_key AND e.at_delivered <= v_fig.total - v_set.window_size;

  IF v_fig.delivered < v_set.min_sample THEN
    RETURN false;
  END IF;
  IF v_fig.bounce_rate >= v_set.bounce_pause THEN
    v_reason := format('hard-bounce rate %s %% >= %s %% over the last %s delivered',
                       round(v_fig.bounce_rate * 100, 2), round(v_set.bounce_pause * 100, 2), round(v_fig.delivered));
  ELSIF v_fig.complaint_rate >= v_set.complaint_pause THEN
    v_reason := format('complaint rate %s %% >= %s %% over the last %s delivered',
                       round(v_fig.complaint_rate * 100, 3), round(v_set.complaint_pause * 100, 3), round(v_fig.delivered));
  ELSE
    RETURN false;
  END IF;

  IF p_scope = 'campaign' THEN
    -- The campaign's status is what claim_batch's gate reads: no claim that
    -- starts after this commits hands its mail out (the gate parks it). Its
    -- queued mail is not parked here: that would wait for the locks of
    -- claims in flight inside a runner's outcome transaction.
    UPDATE mailroom.campaigns SET status = 'paused', updated_at = p_now
    WHERE id = p_key::bigint AND status = 'active';
    v_paused := FOUND;
  ELSE
    INSERT INTO mailroom.sender_pauses (sender, paused_at, reason, figures)
    VALUES (p_key, p_now, 'circuit breaker: ' || v_reason,
            jsonb_build_object('delivered', v_fig.delivered, 'bounced', v_fig.bounced, 'complained', v_fig.complained,
                               'bounce_rate', v_fig.bounce_rate, 'complaint_rate', v_fig.complaint_rate))
    ON CONFLICT (sender) DO NOTHING;
    v_paused := FOUND;
  END IF;
  IF v_paused THEN
    INSERT INTO mailroom.breaker_trips (scope, key, tripped_at, reason, delivered, bounced, complained,
                                        bounce_rate, complaint_rate)
    VALUES (p_scope, p_key, p_now, v_reason, v_fig.delivered, v_fig.bounced, v_fig.complained,
            v_fig.bounce_rate, v_fig.complaint_rate);
  END IF;
  RETURN v_paused;
END
$$;
ALTER FUNCTION mailroom._breaker_tally(text, text, integer, integer, integer, timestamptz) OWNER TO mailroom_owner;
REVOKE ALL ON FUNCTION mailroom._breaker_tally(text, text, integer, integer, integer, timestamptz) FROM PUBLIC;
COMMENT ON FUNCTION mailroom._breaker_tally(text, text, integer, integer, integer, timestamptz) IS
  'Internal: count delivered, hard-bounced and complained mail for one campaign or sender. Delivered mail goes to this backend''s own row (no lock another reporter waits for). A bad event locks the campaign''s or sender''s breaker_counts row until commit, so bad events take turns and each sees all before it (no trip missed: the argument is in deploy/circuit_breaker.sql), is recorded at the delivered count it sees, and when a rate over the last window_size delivered reaches its pause threshold (with at least min_sample delivered in the window) pauses it and records the trip. True when this call paused it.';

-- The campaigns and senders of a report's finished mail come from the queue
-- rows it deleted (mark_outcomes), one element per mail: nothing is looked
-- up here.
CREATE FUNCTION mailroom._breaker_count_outcomes(
  p_delivered_campaigns bigint[],   -- delivered: sent, and hard-bounced during the SMTP conversation
  p_delivered_senders   text[],
  p_bounced_campaigns   bigint[],   -- of those, the hard bounces
  p_bounced_senders     text[],
  p_now                 timestamptz
)
RETURNS void
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = mailroom, pg_temp
AS $$
DECLARE
  v_fold boolean;
BEGIN
  -- Delivered mail: one pending row per sender and campaign, with how
  -- many, counted by a later fold (mark_outcomes' lean statement writes the
  -- same rows itself). Nothing here waits for another reporter, and no
  -- other reporter waits for this.
  WITH added AS (
    INSERT INTO mailroom.breaker_pending (sender, campaign_id, delivered, recorded_at)
    SELECT m.sender, m.campaign_id, count(*), p_now
    FROM unnest(p_delivered_campaigns, p_delivered_senders) AS m(campaign_id, sender)
    GROUP BY m.sender, m.campaign_id
    RETURNING id
  )
  SELECT coalesce(bool_or(a.id % 200 = 0), false) INTO v_fold FROM added a;
  -- Keep what is pending short whatever the pg_cron job does: the report
  -- whose rows pass a multiple of 200 (one in 200 where each report
  -- carries one sender and campaign: about 10,000 mails) folds it, so a bad
  -- event or a read of breaker_status never has a long backlog to sum. (Told by the rows' numbers: v0.4's first cut
  -- counted the rows on every report, reading past every dead version the
  -- folds had left since the table was last vacuumed.)
  IF v_fold THEN
    PERFORM mailroom.breaker_fold();
  END IF;

  IF cardinality(p_bounced_senders) > 0 THEN
    -- The bounces evaluate, one tally per campaign and sender in one fixed
    -- order (campaigns before senders, each by key), so that two batches
    -- locking the same breaker_counts rows cannot deadlock.
    PERFORM mailroom._breaker_tally(t.scope, t.key, 0, t.bounced, 0, p_now)
    FROM (
      SELECT x.scope, x.key, count(*)::integer AS bounced
      FROM unnest(p_bounced_campaigns, p_bounced_senders) AS m(campaign_id, sender)
      CROSS JOIN LATERAL (VALUES ('campaign', m.campaign_id::text), ('sender', m.sender)) AS x(scope, key)
      WHERE x.key IS NOT NULL
      GROUP BY x.scope, x.key
      ORDER BY x.scope, x.key
    ) AS t;
  END IF;
END
$$;
ALTER FUNCTION mailroom._breaker_count_outcomes(bigint[], text[], bigint[], text[], timestamptz) OWNER TO mailroom_owner;
REVOKE ALL ON FUNCTION mailroom._breaker_count_outcomes(bigint[], text[], bigint[], text[], timestamptz) FROM PUBLIC;
COMMENT ON FUNCTION mailroom._breaker_count_outcomes(bigint[], text[], bigint[], text[], timestamptz) IS
  'Internal (mark_outcomes): count finished mail against its campaign and sender, given per mail (from the queue rows the report deleted): delivered (sent, and hard-bounced during the SMTP conversation) and, of those, the hard bounces. Delivered mail is one insert into breaker_pending, a row per sender and campaign (no lock another reporter waits for, no lookup; the report whose rows pass a multiple of 200 folds what is pending); only the bounces lock their campaign''s and sender''s breaker_counts row, to evaluate.';

CREATE FUNCTION mailroom._breaker_reset(p_scope text, p_key text, p_now timestamptz)
RETURNS void
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = mailroom, pg_temp
AS $$
BEGIN
  -- A resumed campaign or sender starts a fresh window: otherwise the next
  -- bounce would trip it again on the figures the operator just looked at.
  -- Its row first, as a bad event takes it (they take turns); then, in a
  -- statement that starts after, the offset that brings what is counted
  -- now to zero. The counts themselves are not touched (a fold may be
  -- adding to them): mail delivered in a transaction that commits after
  -- this one counts in the new window.
  INSERT INTO mailroom.breaker_counts AS k (scope, key, updated_at)
  VALUES (p_scope, p_key, p_now)
  ON CONFLICT (scope, key) DO UPDATE SET updated_at = EXCLUDED.updated_at;
  UPDATE mailroom.breaker_counts k
  SET delivered_offset = -coalesce((SELECT sum(d.delivered) FROM mailroom.breaker_delivered d
                                    WHERE d.scope = p_scope AND d.key = p_key), 0)
                         - mailroom._breaker_pending_count(p_scope, p_key)
  WHERE k.scope = p_scope AND k.key = p_key;
  DELETE FROM mailroom.breaker_bad_events e WHERE e.scope = p_scope AND e.key = p_key;
  UPDATE mailroom.breaker_trips SET resumed_at = p_now
  WHERE scope = p_scope AND key = p_key AND resumed_at IS NULL;
END
$$;
ALTER FUNCTION mailroom._breaker_reset(text, text, timestamptz) OWNER TO mailroom_owner;
REVOKE ALL ON FUNCTION mailroom._breaker_reset(text, text, timestamptz) FROM PUBLIC;
COMMENT ON FUNCTION mailroom._breaker_reset(text, text, timestamptz) IS
  'Internal (resume_campaign, resume_sender): start one campaign''s or sender''s window afresh (its delivered count since now starts at zero, its bad events are forgotten) and close its open trips.';

CREATE FUNCTION mailroom.resume_sender(p_sender text)
RETURNS integer
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = mailroom, pg_temp
AS $$
DECLARE
  v_count integer;
BEGIN
  IF p_sender IS NULL OR length(p_sender) NOT BETWEEN 1 AND 200 THEN
    RAISE EXCEPTION 'mailroom: sender: must be 1 to 200 characters' USING ERRCODE = '22023';
  END IF;
  -- Deleting the row is what the gate reads: a claim that saw the pause
  -- re-checks the row (FOR SHARE) before parking, so it waits for this
  -- commit and then leaves the mail queued.
  DELETE FROM mailroom.sender_pauses WHERE sender = p_sender;
  IF NOT FOUND THEN
    RETURN 0;
  END IF;
  PERFORM mailroom._breaker_reset('sender', p_sender, now());
  -- The mail the gate parked. No index by sender on the queue: paused mail
  -- is found by a scan, once, when an operator resumes.
  UPDATE mailroom.queue q
  SET status = 'queued', status_reason = NULL, updated_at = greatest(now(), q.updated_at)
  WHERE q.status = 'paused' AND q.status_reason = 'sender_paused' AND q.sender = p_sender;
  GET DIAGNOSTICS v_count = ROW_COUNT;
  PERFORM pg_notify('mailroom', p_sender);
  RETURN v_count;
END
$$;
ALTER FUNCTION mailroom.resume_sender(text) OWNER TO mailroom_owner;
REVOKE ALL ON FUNCTION mailroom.resume_sender(text) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION mailroom.resume_sender(text) TO mailroom_operator;
COMMENT ON FUNCTION mailroom.resume_sender(text) IS
  'Resume a sender the circuit breaker paused: its parked mail is queued again and its counts start afresh. Returns how many mails were queued again; a sender that is not paused: 0.';

CREATE FUNCTION mailroom.set_breaker_thresholds(
  p_scope           text,
  p_window_size     integer DEFAULT NULL,
  p_min_sample      integer DEFAULT NULL,
  p_bounce_warn     numeric DEFAULT NULL,
  p_bounce_pause    numeric DEFAULT NULL,
  p_complaint_warn  numeric DEFAULT NULL,
  p_complaint_pause numeric DEFAULT NULL
)
RETURNS mailroom.breaker_settings
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = mailroom, pg_temp
AS $$
DECLARE
  v_old mailroom.breaker_settings%ROWTYPE;
  v_new mailroom.breaker_settings%ROWTYPE;
BEGIN
  SELECT * INTO v_old FROM mailroom.breaker_settings WHERE scope = p_scope FOR UPDATE;
  IF NOT FOUND THEN
    RAISE EXCEPTION 'mailroom: scope: must be campaign or sender, got %', coalesce(quote_literal(p_scope), 'NULL')
      USING ERRCODE = '22023';
  END IF;
  v_new := v_old;
  v_new.window_size := coalesce(p_window_size, v_old.window_size);
  v_new.min_sample := coalesce(p_min_sample, v_old.min_sample);
  v_new.bounce_warn := coalesce(p_bounce_warn, v_old.bounce_warn);
  v_new.bounce_pause := coalesce(p_bounce_pause, v_old.bounce_pause);
  v_new.complaint_warn := coalesce(p_complaint_warn, v_old.complaint_warn);
  v_new.complaint_pause := coalesce(p_complaint_pause, v_old.complaint_pause);
  v_new.updated_at := now();
  IF v_new.window_size NOT BETWEEN 10 AND 10000000 THEN
    RAISE EXCEPTION 'mailroom: window_size: must be between 10 and 10000000, got %', v_new.window_size
      USING ERRCODE = '22023';
  END IF;
  IF v_new.min_sample NOT BETWEEN 1 AND v_new.window_size THEN
    RAISE EXCEPTION 'mailroom: min_sample: must be between 1 and window_size (%), got %', v_new.window_size,
      v_new.min_sample USING ERRCODE = '22023';
  END IF;
  IF NOT (v_new.bounce_warn > 0 AND v_new.bounce_warn <= v_new.bounce_pause AND v_new.bounce_pause <= 1) THEN
    RAISE EXCEPTION 'mailroom: bounce_warn, bounce_pause: need 0 < warn <= pause <= 1 (fractions: 0.05 is 5 %%), got % and %',
      v_new.bounce_warn, v_new.bounce_pause USING ERRCODE = '22023';
  END IF;
  IF NOT (v_new.complaint_warn > 0 AND v_new.complaint_warn <= v_new.complaint_pause AND v_new.complaint_pause <= 1) THEN
    RAISE EXCEPTION 'mailroom: complaint_warn, complaint_pause: need 0 < warn <= pause <= 1 (fractions: 0.001 is 0.1 %%), got % and %',
      v_new.complaint_warn, v_new.complaint_pause USING ERRCODE = '22023';
  END IF;
  UPDATE mailroom.breaker_settings s
  SET window_size = v_new.window_size, min_sample = v_new.min_sample, bounce_warn = v_new.bounce_warn,
      bounce_pause = v_new.bounce_pause, complaint_warn = v_new.complaint_warn,
      complaint_pause = v_new.complaint_pause, updated_at = v_new.updated_at
  WHERE s.scope = p_scope;
  RETURN v_new;
END
$$;
ALTER FUNCTION mailroom.set_breaker_thresholds(text, integer, integer, numeric, numeric, numeric, numeric) OWNER TO mailroom_owner;
REVOKE ALL ON FUNCTION mailroom.set_breaker_thresholds(text, integer, integer, numeric, numeric, numeric, numeric) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION mailroom.set_breaker_thresholds(text, integer, integer, numeric, numeric, numeric, numeric) TO mailroom_operator;
COMMENT ON FUNCTION mailroom.set_breaker_thresholds(text, integer, integer, numeric, numeric, numeric, numeric) IS
  'Set the circuit breaker of one scope (campaign or sender): window size N, minimum sample, warning and pause rates as fractions (0.05 = 5 %). NULL keeps a value. Returns the new settings.';

-- What operators look at: every campaign and sender with counts, its
-- windowed rates, and whether it is fine, warned, or paused by the breaker.
-- One with an empty window (nothing delivered since its resume, no bad
-- event in it) is not shown.
CREATE VIEW mailroom.breaker_status WITH (security_barrier) AS
SELECT b.scope, b.key,
       CASE WHEN b.scope = 'campaign' THEN k.name END AS campaign_name,
       CASE WHEN t.id IS NOT NULL AND (b.scope = 'sender' OR k.status = 'paused') THEN 'paused'
            WHEN f.delivered >= s.min_sample AND (f.bounce_rate >= s.bounce_warn OR f.complaint_rate >= s.complaint_warn)
              THEN 'warning'
            ELSE 'ok' END AS state,
       f.delivered, f.bounced, f.complained, f.bounce_rate, f.complaint_rate,
       t.tripped_at, t.reason,
       b.updated_at
-- Every campaign and sender with something counted: its delivered total
-- (folded rows, offset and pending mail, summed in one pass: no lookup per
-- campaign or sender).
FROM (SELECT parts.scope, parts.key, sum(parts.n) AS total, max(parts.at) AS updated_at
      FROM (SELECT d.scope, d.key, d.delivered AS n, d.updated_at AS at FROM mailroom.breaker_delivered d
            UNION ALL
            SELECT k.scope, k.key, k.delivered_offset, k.updated_at FROM mailroom.breaker_counts k
            UNION ALL
            SELECT x.scope, x.key, p.delivered, p.recorded_at FROM mailroom.breaker_pending p
            CROSS JOIN LATERAL (VALUES ('sender', p.sender), ('campaign', p.campaign_id::text)) AS x(scope, key)
            WHERE x.key IS NOT NULL) AS parts
      GROUP BY parts.scope, parts.key) AS b
JOIN mailroom.breaker_settings s ON s.scope = b.scope
-- The same arithmetic as _breaker_figures, written out: a function called
-- by a view is executed with the reader's rights, and operators execute no
-- internal function.
CROSS JOIN LATERAL (SELECT round(least(greatest(b.total, 0), s.window_size), 2) AS delivered,
                           round(coalesce(sum(e.bounced), 0), 2) AS bounced,
                           round(coalesce(sum(e.complained), 0), 2) AS complained
                    FROM mailroom.breaker_bad_events e
                    WHERE e.scope = b.scope AND e.key = b.key AND e.at_delivered > b.total - s.window_size) AS w
CROSS JOIN LATERAL (SELECT w.delivered, w.bounced, w.complained,
                           CASE WHEN w.delivered > 0 THEN round(w.bounced / w.delivered, 6) ELSE 0 END AS bounce_rate,
                           CASE WHEN w.delivered > 0 THEN round(w.complained / w.delivered, 6) ELSE 0 END AS complaint_rate
                   ) AS f
-- (the CASE: a sender's key is no number, and a join condition may be
-- evaluated for every row)
LEFT JOIN mailroom.campaigns k ON k.id = CASE WHEN b.scope = 'campaign' THEN b.key::bigint END
LEFT JOIN LATERAL (SELECT tr.id, tr.tripped_at, tr.reason FROM mailroom.breaker_trips tr
                   WHERE tr.scope = b.scope AND tr.key = b.key AND tr.resumed_at IS NULL
                   ORDER BY tr.id DESC LIMIT 1) AS t ON true
WHERE f.delivered > 0 OR f.bounced > 0 OR f.complained > 0 OR t.id IS NOT NULL;
ALTER VIEW mailroom.breaker_status OWNER TO mailroom_owner;
REVOKE ALL ON mailroom.breaker_status FROM PUBLIC;
GRANT SELECT ON mailroom.breaker_status TO mailroom_operator;
-- Only where pg_cron is installed in this database, like mailroom-prune:
-- a clean stream has no bad event to fold its pending mail, so its pending
-- rows (and the lookups the next bad event or a read of breaker_status
-- makes) stay bounded by a minute of mail.
DO $$
BEGIN
  IF EXISTS (SELECT FROM pg_catalog.pg_extension WHERE extname = 'pg_cron') THEN
    PERFORM cron.schedule('mailroom-breaker-fold', '* * * * *', 'SELECT mailroom.breaker_fold()');
  END IF;
END
$$;

COMMENT ON VIEW mailroom.breaker_status IS
  'Circuit breaker per campaign and sender: delivered, bounced and complained mail over the last window_size delivered (fewer after a resume), the rates (fractions), and state ok, warning (a rate at its warning level) or paused (tripped; reason and tripped_at say why and when). Resume with resume_campaign or resume_sender.';

COMMIT;
