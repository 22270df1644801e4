-- Deploy mailroom:delivery_metrics to pg
-- requires: delivery_metrics@v0.2.0

-- The ledger row of an attempt in flight is written when its lease ends, so
-- attempts claimed in the window also count the leases held on messages now.

BEGIN;

CREATE OR REPLACE FUNCTION mailroom.delivery_metrics(
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

  -- The recipient's time zone: the message's own (campaign mail), else that
  -- of the schedule that made it; NULL when neither says.
  RETURN QUERY
    WITH events AS (
      -- Ledger rows that may matter: claimed in the window, or up to a day
      -- (the longest lease) before it and finished inside it.
      SELECT m.sender, coalesce(m.recipient_zone, sc.time_zone) AS time_zone, true AS is_attempt,
             a.claimed_at, coalesce(a.reported_at, a.finished_at) AS finished_at, a.reported, a.outcome, a.duplicate,
             -- Tries it took: the message's claims up to this successful one
             -- (counted, since an operator retry restarts attempt numbers).
             CASE WHEN a.reported = 'sent' AND NOT a.duplicate THEN
               (SELECT count(*) FROM mailroom.attempts p
                WHERE p.message_id = a.message_id AND p.id <= a.id AND p.outcome IS DISTINCT FROM 'released')
             END AS tries,
             NULL::timestamptz AS run_at
      FROM mailroom.attempts a
      JOIN mailroom.messages m ON m.id = a.message_id
      LEFT JOIN mailroom.schedules sc ON sc.id = m.schedule_id
      WHERE a.claimed_at > v_from - interval '1 day' AND a.claimed_at <= p_now
      UNION ALL
      -- Attempts in flight: their ledger row is written when the lease ends.
      SELECT m.sender, coalesce(m.recipient_zone, sc.time_zone), true, m.claimed_at, NULL, NULL, NULL, false, NULL, NULL
      FROM mailroom.messages m
      LEFT JOIN mailroom.schedules sc ON sc.id = m.schedule_id
      WHERE m.status = 'sending' AND m.claimed_at > v_from AND m.claimed_at <= p_now
        AND NOT EXISTS (SELECT FROM mailroom.attempts a WHERE a.message_id = m.id AND a.lease_token = m.lease_token)
      UNION ALL
      SELECT m.sender, coalesce(m.recipient_zone, sc.time_zone), false, NULL, NULL, NULL, NULL, false, NULL, m.run_at
      FROM mailroom.messages m
      LEFT JOIN mailroom.schedules sc ON sc.id = m.schedule_id
      WHERE m.status = 'queued' AND m.run_at <= p_now
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

COMMIT;
