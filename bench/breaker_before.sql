-- bench/breaker.py's "before" side: the circuit breaker's counting as it was
-- before brk5 (deploy/circuit_breaker.sql at 2a84918), under other names, in
-- the scratch database only. Every outcome batch updates one counter row per
-- campaign and per sender and holds it until commit: concurrent reporters of
-- one sender queue on that row. The bench swaps this body of
-- _bench_breaker_count_outcomes_before in as _breaker_count_outcomes.

CREATE TABLE mailroom.bench_breaker_counts_before (
  scope           text NOT NULL,
  key             text NOT NULL,
  cur_delivered   integer NOT NULL DEFAULT 0,
  cur_bounced     integer NOT NULL DEFAULT 0,
  cur_complained  integer NOT NULL DEFAULT 0,
  prev_delivered  integer NOT NULL DEFAULT 0,
  prev_bounced    integer NOT NULL DEFAULT 0,
  prev_complained integer NOT NULL DEFAULT 0,
  updated_at      timestamptz NOT NULL DEFAULT now(),
  CONSTRAINT bench_breaker_counts_before_pkey PRIMARY KEY (scope, key)
) WITH (fillfactor = 50);
ALTER TABLE mailroom.bench_breaker_counts_before OWNER TO mailroom_owner;

-- Windowed figures of one counter row under its scope's settings.
CREATE FUNCTION mailroom._bench_breaker_figures_before(p_counts mailroom.bench_breaker_counts_before, p_window integer)
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
ALTER FUNCTION mailroom._bench_breaker_figures_before(mailroom.bench_breaker_counts_before, integer) OWNER TO mailroom_owner;
REVOKE ALL ON FUNCTION mailroom._bench_breaker_figures_before(mailroom.bench_breaker_counts_before, integer) FROM PUBLIC;

CREATE FUNCTION mailroom._bench_breaker_tally_before(
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
  v_counts mailroom.bench_breaker_counts_before%ROWTYPE;
  v_fig    record;
  v_reason text;
  v_paused boolean := false;
BEGIN
  SELECT * INTO STRICT v_set FROM mailroom.breaker_settings WHERE scope = p_scope;
  -- A full current bucket becomes the previous one before this event counts.
  INSERT INTO mailroom.bench_breaker_counts_before AS b (scope, key, cur_delivered, cur_bounced, cur_complained, updated_at)
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
  SELECT * INTO v_fig FROM mailroom._bench_breaker_figures_before(v_counts, v_set.window_size);
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
ALTER FUNCTION mailroom._bench_breaker_tally_before(text, text, integer, integer, integer, timestamptz) OWNER TO mailroom_owner;
REVOKE ALL ON FUNCTION mailroom._bench_breaker_tally_before(text, text, integer, integer, integer, timestamptz) FROM PUBLIC;

CREATE FUNCTION mailroom._bench_breaker_count_outcomes_before(p_sent bigint[], p_bounced bigint[], p_now timestamptz)
RETURNS void
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = mailroom, pg_temp
AS $$
BEGIN
  -- One tally per campaign and per sender among these mails, in one fixed
  -- order (campaigns before senders, each by key), so that two outcome
  -- batches locking the same counter rows cannot deadlock.
  PERFORM mailroom._bench_breaker_tally_before(t.scope, t.key, t.delivered, t.bounced, 0, p_now)
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
ALTER FUNCTION mailroom._bench_breaker_count_outcomes_before(bigint[], bigint[], timestamptz) OWNER TO mailroom_owner;
REVOKE ALL ON FUNCTION mailroom._bench_breaker_count_outcomes_before(bigint[], bigint[], timestamptz) FROM PUBLIC;


-- The side "shards": brk5's first step (commit 3bac53c), delivered mail counted per
-- campaign and sender at report time (one contents lookup per mail) in the
-- reporting backend's own breaker_delivered row; the bounces as HEAD.
CREATE FUNCTION mailroom._bench_breaker_count_outcomes_shards(p_sent bigint[], p_bounced bigint[], p_now timestamptz)
RETURNS void
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = mailroom, pg_temp
AS $$
BEGIN
  -- Delivered mail (sent, and the synchronous hard bounces), per campaign
  -- and sender, in one statement on this backend's own rows: nothing here
  -- waits for another reporter, and no other reporter waits for this.
  INSERT INTO mailroom.breaker_delivered AS d (scope, key, backend_pid, delivered, updated_at)
  SELECT x.scope, x.key, pg_backend_pid(), count(*), p_now
  FROM (SELECT u.id FROM unnest(p_sent) AS u(id)
        UNION ALL
        SELECT u.id FROM unnest(p_bounced) AS u(id)) AS m
  JOIN mailroom.contents c ON c.id = m.id
  CROSS JOIN LATERAL (VALUES ('campaign', c.campaign_id::text), ('sender', c.sender)) AS x(scope, key)
  WHERE x.key IS NOT NULL
  GROUP BY x.scope, x.key
  ON CONFLICT (scope, key, backend_pid) DO UPDATE
  SET delivered = d.delivered + EXCLUDED.delivered, updated_at = EXCLUDED.updated_at;

  IF cardinality(p_bounced) > 0 THEN
    -- The bounces evaluate, one tally per campaign and sender in one fixed
    -- order (campaigns before senders, each by key), so that two batches
    -- locking the same breaker_counts rows cannot deadlock.
    PERFORM mailroom._breaker_tally(t.scope, t.key, 0, t.bounced, 0, p_now)
    FROM (
      SELECT x.scope, x.key, count(*)::integer AS bounced
      FROM unnest(p_bounced) AS m(id)
      JOIN mailroom.contents c ON c.id = m.id
      CROSS JOIN LATERAL (VALUES ('campaign', c.campaign_id::text), ('sender', c.sender)) AS x(scope, key)
      WHERE x.key IS NOT NULL
      GROUP BY x.scope, x.key
      ORDER BY x.scope, x.key
    ) AS t;
  END IF;
END
$$;
