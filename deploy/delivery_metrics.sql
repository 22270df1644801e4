-- Deploy mailroom:delivery_metrics to pg
-- requires: delivery_metrics@v0.3.0
-- requires: split_messages

-- v0.4: attempts are the ledger's rows joined to contents (sender, recipient
-- zone, schedule); attempts in flight are queue rows that are sending (v0.3
-- also looked for ledger rows a claim before v0.3.0 had opened;
-- split_messages removed those); overdue mail is the queue's due rows. No
-- clock parameter on what an operator may execute: delivery_metrics(window)
-- measures up to now(); the owner-only twin _delivery_metrics(window, now)
-- pins the clock for tests.

BEGIN;

DROP FUNCTION mailroom.delivery_metrics(interval, timestamptz);

CREATE FUNCTION mailroom._delivery_metrics(
  p_window interval    DEFAULT '1 hour',
  p_now    timestamptz DEFAULT now()
)
RETURNS TABLE (
  split                 text,
  sender                text,
  time_zone             text,
  attempts              bigint,
  deliveries            bigint,
  failures              bigint,
  latency_p50           interval,
  latency_p95           interval,
  oldest_overdue        interval,
  expired_leases        bigint,
  attempts_per_delivery numeric,
  duplicates            bigint
)
LANGUAGE plpgsql STABLE
SECURITY DEFINER
SET search_path = mailroom, pg_temp
-- Key lookups only: every row of the window or of the live queue finds its
-- contents, schedule and earlier attempts by index. A hash join instead read
-- all of contents - the whole history - for the queue's overdue rows or the
-- day's attempts (7 s with 1,000,000 mails of history).
SET enable_hashjoin = off
SET enable_mergejoin = off
AS $$
#variable_conflict use_column
DECLARE
  v_from timestamptz := p_now - p_window;
BEGIN
  IF p_window IS NULL OR p_window <= interval '0' OR p_window > interval '366 days' THEN
    RAISE EXCEPTION 'mailroom: window: must be more than 0 and at most 366 days, got %', coalesce(p_window::text, 'NULL')
      USING ERRCODE = '22023';
  END IF;
  IF p_now IS NULL THEN
    RAISE EXCEPTION 'mailroom: now: must not be NULL' USING ERRCODE = '22023';
  END IF;

  -- The recipient's time zone: the mail's own (contents.recipient_zone,
  -- campaign mail), else that of the schedule that made it; NULL when
  -- neither says.
  RETURN QUERY
    WITH events AS (
      -- Ledger rows that may matter: claimed in the window, or up to a day
      -- (the longest lease) before it and finished inside it
      -- (attempts_claimed_at_idx). Decisions without an attempt (cancelled,
      -- resolved rows) are not attempts.
      SELECT c.sender, coalesce(c.recipient_zone, sc.time_zone) AS time_zone, true AS is_attempt,
             a.claimed_at, coalesce(a.reported_at, a.finished_at) AS finished_at, a.reported, a.outcome, a.duplicate,
             -- Tries it took: the mail's claims up to this successful one
             -- (counted, since an operator retry restarts attempt numbers).
             CASE WHEN a.reported = 'sent' AND NOT a.duplicate THEN
               (SELECT count(*) FROM mailroom.attempts p
                WHERE p.message_id = a.message_id AND p.id <= a.id
                  AND p.outcome NOT IN ('released', 'cancelled', 'resolved', 'bounced'))
             END AS tries,
             NULL::timestamptz AS run_at
      FROM mailroom.attempts a
      JOIN mailroom.contents c ON c.id = a.message_id
      LEFT JOIN mailroom.schedules sc ON sc.id = c.schedule_id
      WHERE a.claimed_at > v_from - interval '1 day' AND a.claimed_at <= p_now
        AND a.outcome NOT IN ('cancelled', 'resolved', 'bounced')
      UNION ALL
      -- Attempts in flight: queue rows that are sending (their ledger row is
      -- written when the lease ends).
      SELECT q.sender, coalesce(c.recipient_zone, sc.time_zone), true, q.claimed_at, NULL, NULL, NULL, false, NULL, NULL
      FROM mailroom.queue q
      JOIN mailroom.contents c ON c.id = q.id
      LEFT JOIN mailroom.schedules sc ON sc.id = c.schedule_id
      WHERE q.status = 'sending' AND q.claimed_at > v_from AND q.claimed_at <= p_now
      UNION ALL
      -- Overdue: due queue rows (the claim index's rows).
      SELECT q.sender, coalesce(c.recipient_zone, sc.time_zone), false, NULL, NULL, NULL, NULL, false, NULL, q.run_at
      FROM mailroom.queue q
      JOIN mailroom.contents c ON c.id = q.id
      LEFT JOIN mailroom.schedules sc ON sc.id = c.schedule_id
      WHERE q.status = 'queued' AND q.run_at <= p_now
    ),
    marked AS (
      SELECT e.*,
             e.is_attempt AND e.claimed_at > v_from AND e.outcome IS DISTINCT FROM 'released' AS in_claimed,
             e.is_attempt AND e.finished_at > v_from AND e.finished_at <= p_now AS in_finished
      FROM events e
    )
    SELECT CASE WHEN grouping(x.sender) = 0 THEN 'sender'
                WHEN grouping(x.time_zone) = 0 THEN 'time_zone'
                ELSE 'total' END,
           x.sender,
           x.time_zone,
           count(*) FILTER (WHERE x.in_claimed),
           count(*) FILTER (WHERE x.in_finished AND x.reported = 'sent' AND NOT x.duplicate),
           count(*) FILTER (WHERE x.in_finished AND x.outcome = 'failed'),
           make_interval(secs => percentile_cont(0.5) WITHIN GROUP (ORDER BY extract(epoch FROM x.finished_at - x.claimed_at))
                                 FILTER (WHERE x.in_finished AND x.reported = 'sent')),
           make_interval(secs => percentile_cont(0.95) WITHIN GROUP (ORDER BY extract(epoch FROM x.finished_at - x.claimed_at))
                                 FILTER (WHERE x.in_finished AND x.reported = 'sent')),
           p_now - min(x.run_at),
           count(*) FILTER (WHERE x.in_finished AND x.outcome IN ('expired', 'stale')),
           round(avg(x.tries) FILTER (WHERE x.in_finished AND x.reported = 'sent' AND NOT x.duplicate), 2),
           count(*) FILTER (WHERE x.in_finished AND x.duplicate)
    FROM marked x
    GROUP BY GROUPING SETS ((x.sender), (x.time_zone), ())
    ORDER BY 1, 2, 3;
END
$$;
ALTER FUNCTION mailroom._delivery_metrics(interval, timestamptz) OWNER TO mailroom_owner;
REVOKE ALL ON FUNCTION mailroom._delivery_metrics(interval, timestamptz) FROM PUBLIC;
COMMENT ON FUNCTION mailroom._delivery_metrics(interval, timestamptz) IS
  'Owner only (tests pin the clock): mailroom.delivery_metrics over (p_now - p_window, p_now].';

CREATE FUNCTION mailroom.delivery_metrics(p_window interval DEFAULT '1 hour')
RETURNS TABLE (
  split                 text,
  sender                text,
  time_zone             text,
  attempts              bigint,
  deliveries            bigint,
  failures              bigint,
  latency_p50           interval,
  latency_p95           interval,
  oldest_overdue        interval,
  expired_leases        bigint,
  attempts_per_delivery numeric,
  duplicates            bigint
)
LANGUAGE sql STABLE
SECURITY DEFINER
SET search_path = mailroom, pg_temp
AS $$
  SELECT * FROM mailroom._delivery_metrics(p_window, now())
$$;
ALTER FUNCTION mailroom.delivery_metrics(interval) OWNER TO mailroom_owner;
REVOKE ALL ON FUNCTION mailroom.delivery_metrics(interval) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION mailroom.delivery_metrics(interval) TO mailroom_operator;
COMMENT ON FUNCTION mailroom.delivery_metrics(interval) IS
  'Delivery health over (now() - p_window, now()], one row per sender (split = sender), per recipient time zone (split = time_zone: contents.recipient_zone, else the schedule''s zone; NULL = unknown) and a total: attempts claimed, first deliveries, failures, claim-to-send latency p50/p95, oldest overdue age, expired leases, average attempts per delivery, duplicate sends.';

COMMIT;
