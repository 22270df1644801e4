-- Deploy mailroom:circuit_breaker to pg
-- requires: table_breaker
-- requires: split_messages

-- The circuit breaker (issue 16): a campaign or a sender whose rolling
-- hard-bounce or complaint rate reaches its pause threshold is paused
-- automatically, with the reason and the figures kept in breaker_trips.
--
-- Where it is evaluated: in the transaction that counts the bad event
-- (mark_outcomes for a synchronous 5.1.x; for a bounce or complaint
-- reported later, the insert into feedback_events: see breaker_feedback),
-- on the one counter row of that campaign or sender, which the update
-- locks. Two reports for one campaign therefore
-- serialise on its row and each sees the other's count: no lost update, no
-- trip missed, and the pause is one UPDATE of the campaign's status (the
-- claim gate parks its mail) or one row in sender_pauses (the gate parks
-- the sender's mail). Only a bad event can raise a rate, so a delivered
-- mail only counts and never evaluates. Nothing else stops: other
-- campaigns and senders go on.

BEGIN;

-- Windowed figures of one counter row under its scope's settings.
CREATE FUNCTION mailroom._breaker_figures(p_counts mailroom.breaker_counts, p_window integer)
RETURNS TABLE (delivered numeric, bounced numeric, complained numeric, bounce_rate numeric, complaint_rate numeric)
LANGUAGE sql IMMUTABLE
SECURITY DEFINER
SET search_path = mailroom, pg_temp
AS $$
  SELECT d, b, c,
         CASE WHEN d > 0 THEN round(b / d, 6) ELSE 0 END,
         CASE WHEN d > 0 THEN round(c / d, 6) ELSE 0 END
  FROM (SELECT CASE WHEN (p_counts).prev_delivered > 0
                      THEN greatest(0, 1 - (p_counts).cur_delivered::numeric / p_window) ELSE 0 END AS w) AS share
  CROSS JOIN LATERAL (
    SELECT round((p_counts).cur_delivered + (p_counts).prev_delivered * share.w, 2) AS d,
           round((p_counts).cur_bounced + (p_counts).prev_bounced * share.w, 2) AS b,
           round((p_counts).cur_complained + (p_counts).prev_complained * share.w, 2) AS c
  ) AS f
$$;
ALTER FUNCTION mailroom._breaker_figures(mailroom.breaker_counts, integer) OWNER TO mailroom_owner;
REVOKE ALL ON FUNCTION mailroom._breaker_figures(mailroom.breaker_counts, integer) FROM PUBLIC;
COMMENT ON FUNCTION mailroom._breaker_figures(mailroom.breaker_counts, integer) IS
  'Internal: delivered, bounced and complained mail over about the last p_window delivered (the current bucket plus the part of the previous one still inside the window) and the two rates.';

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
AS $$
DECLARE
  v_set    mailroom.breaker_settings%ROWTYPE;
  v_counts mailroom.breaker_counts%ROWTYPE;
  v_fig    record;
  v_reason text;
  v_paused boolean := false;
BEGIN
  SELECT * INTO STRICT v_set FROM mailroom.breaker_settings WHERE scope = p_scope;
  -- A full current bucket becomes the previous one before this event counts.
  INSERT INTO mailroom.breaker_counts AS b (scope, key, cur_delivered, cur_bounced, cur_complained, updated_at)
  VALUES (p_scope, p_key, p_delivered, p_bounced, p_complained, p_now)
  ON CONFLICT (scope, key) DO UPDATE SET
    prev_delivered  = CASE WHEN b.cur_delivered >= v_set.window_size THEN b.cur_delivered ELSE b.prev_delivered END,
    prev_bounced    = CASE WHEN b.cur_delivered >= v_set.window_size THEN b.cur_bounced ELSE b.prev_bounced END,
    prev_complained = CASE WHEN b.cur_delivered >= v_set.window_size THEN b.cur_complained ELSE b.prev_complained END,
    cur_delivered   = CASE WHEN b.cur_delivered >= v_set.window_size THEN 0 ELSE b.cur_delivered END + p_delivered,
    cur_bounced     = CASE WHEN b.cur_delivered >= v_set.window_size THEN 0 ELSE b.cur_bounced END + p_bounced,
    cur_complained  = CASE WHEN b.cur_delivered >= v_set.window_size THEN 0 ELSE b.cur_complained END + p_complained,
    updated_at      = p_now
  RETURNING * INTO v_counts;

  -- Only a bad event can raise a rate: a delivered mail never trips.
  IF p_bounced = 0 AND p_complained = 0 THEN
    RETURN false;
  END IF;
  SELECT * INTO v_fig FROM mailroom._breaker_figures(v_counts, v_set.window_size);
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
    VALUES (p_key, p_now, 'circuit breaker: ' || v_reason, to_jsonb(v_fig))
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
  'Internal: count delivered, hard-bounced and complained mail for one campaign or sender and, when a bad event brings a rate to its pause threshold (with the minimum sample in the window), pause it and record the trip. True when this call paused it.';

CREATE FUNCTION mailroom._breaker_count_outcomes(p_sent bigint[], p_bounced bigint[], p_now timestamptz)
RETURNS void
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = mailroom, pg_temp
AS $$
BEGIN
  -- One tally per campaign and per sender among these mails, in one fixed
  -- order (campaigns before senders, each by key), so that two outcome
  -- batches locking the same counter rows cannot deadlock.
  PERFORM mailroom._breaker_tally(t.scope, t.key, t.delivered, t.bounced, 0, p_now)
  FROM (
    SELECT x.scope, x.key, count(*)::integer AS delivered, count(*) FILTER (WHERE x.bounce)::integer AS bounced
    FROM (SELECT u.id, false AS bounce FROM unnest(p_sent) AS u(id)
          UNION ALL
          SELECT u.id, true FROM unnest(p_bounced) AS u(id)) AS m
    JOIN mailroom.contents c ON c.id = m.id
    CROSS JOIN LATERAL (VALUES ('campaign', c.campaign_id::text, m.bounce), ('sender', c.sender, m.bounce))
      AS x(scope, key, bounce)
    WHERE x.key IS NOT NULL
    GROUP BY x.scope, x.key
    ORDER BY x.scope, x.key
  ) AS t;
END
$$;
ALTER FUNCTION mailroom._breaker_count_outcomes(bigint[], bigint[], timestamptz) OWNER TO mailroom_owner;
REVOKE ALL ON FUNCTION mailroom._breaker_count_outcomes(bigint[], bigint[], timestamptz) FROM PUBLIC;
COMMENT ON FUNCTION mailroom._breaker_count_outcomes(bigint[], bigint[], timestamptz) IS
  'Internal (mark_outcomes): count finished mail against its campaign and sender: p_sent delivered, p_bounced hard-bounced during the SMTP conversation (delivered and bounced).';

CREATE FUNCTION mailroom._breaker_reset(p_scope text, p_key text, p_now timestamptz)
RETURNS void
LANGUAGE sql
SECURITY DEFINER
SET search_path = mailroom, pg_temp
AS $$
  -- A resumed campaign or sender starts a fresh window: otherwise the next
  -- bounce would trip it again on the figures the operator just looked at.
  DELETE FROM mailroom.breaker_counts WHERE scope = p_scope AND key = p_key;
  UPDATE mailroom.breaker_trips SET resumed_at = p_now
  WHERE scope = p_scope AND key = p_key AND resumed_at IS NULL;
$$;
ALTER FUNCTION mailroom._breaker_reset(text, text, timestamptz) OWNER TO mailroom_owner;
REVOKE ALL ON FUNCTION mailroom._breaker_reset(text, text, timestamptz) FROM PUBLIC;
COMMENT ON FUNCTION mailroom._breaker_reset(text, text, timestamptz) IS
  'Internal (resume_campaign, resume_sender): forget the counts of one campaign or sender and close its open trips.';

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
FROM mailroom.breaker_counts b
JOIN mailroom.breaker_settings s ON s.scope = b.scope
-- The same arithmetic as _breaker_figures, written out: a function called
-- by a view is executed with the reader's rights, and operators execute no
-- internal function.
CROSS JOIN LATERAL (SELECT CASE WHEN b.prev_delivered > 0
                                THEN greatest(0, 1 - b.cur_delivered::numeric / s.window_size) ELSE 0 END AS w) AS share
CROSS JOIN LATERAL (SELECT round(b.cur_delivered + b.prev_delivered * share.w, 2) AS delivered,
                           round(b.cur_bounced + b.prev_bounced * share.w, 2) AS bounced,
                           round(b.cur_complained + b.prev_complained * share.w, 2) AS complained) AS n
CROSS JOIN LATERAL (SELECT n.delivered, n.bounced, n.complained,
                           CASE WHEN n.delivered > 0 THEN round(n.bounced / n.delivered, 6) ELSE 0 END AS bounce_rate,
                           CASE WHEN n.delivered > 0 THEN round(n.complained / n.delivered, 6) ELSE 0 END AS complaint_rate
                   ) AS f
-- (the CASE: a sender's key is no number, and a join condition may be
-- evaluated for every row)
LEFT JOIN mailroom.campaigns k ON k.id = CASE WHEN b.scope = 'campaign' THEN b.key::bigint END
LEFT JOIN LATERAL (SELECT tr.id, tr.tripped_at, tr.reason FROM mailroom.breaker_trips tr
                   WHERE tr.scope = b.scope AND tr.key = b.key AND tr.resumed_at IS NULL
                   ORDER BY tr.id DESC LIMIT 1) AS t ON true;
ALTER VIEW mailroom.breaker_status OWNER TO mailroom_owner;
REVOKE ALL ON mailroom.breaker_status FROM PUBLIC;
GRANT SELECT ON mailroom.breaker_status TO mailroom_operator;
COMMENT ON VIEW mailroom.breaker_status IS
  'Circuit breaker per campaign and sender: windowed delivered, bounced and complained mail, the rates (fractions), and state ok, warning (a rate at its warning level) or paused (tripped; reason and tripped_at say why and when). Resume with resume_campaign or resume_sender.';

COMMIT;
