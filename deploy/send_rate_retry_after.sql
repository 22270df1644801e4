-- Deploy mailroom:send_rate_retry_after to pg
-- requires: send_rate_retry_after@v0.3.0
-- requires: split_messages
-- requires: send_rates
-- requires: table_domain_budgets

-- v0.4: no p_now on a function a runner may execute (issue 13, hole 4: a
-- runner could ask about any instant). The public function uses the
-- database clock; the owner-only twin _send_rate_retry_after keeps p_now for
-- tests. It reads only mailroom.rate_limits (senders), domain_budgets,
-- senders and domain_limits, and runs only after a claim came back short.
-- Domain budgets are one domain_budgets row per domain with both windows
-- (slots and cumulative counts), read through _window_hits.

BEGIN;

DROP FUNCTION mailroom.send_rate_retry_after(text, timestamptz);

-- When does a sliding-window budget next allow one more? Pure arithmetic over
-- a row's slots, the same counting as _rate_sliding_take: p_now when it has
-- room now, NULL when p_limit is NULL (no limit).
CREATE OR REPLACE FUNCTION mailroom._rate_free_at(
  p_slots  bigint[],
  p_hits   integer[],
  p_limit  integer,
  p_window interval,
  p_now    timestamptz
) RETURNS timestamptz
LANGUAGE sql
IMMUTABLE
PARALLEL SAFE
AS $$
  WITH w AS (
    SELECT mailroom._rate_slot(p_now, p_window) AS j,
           ceil((extract(epoch FROM p_window) * 1000000)::numeric / 50)::bigint AS res
  ),
  counted AS (
    SELECT u.s, sum(u.h) OVER (ORDER BY u.s) AS cum, sum(u.h) OVER () AS used
    FROM unnest(p_slots, p_hits) AS u(s, h), w
    WHERE u.s >= w.j - 50
  )
  SELECT CASE
           WHEN p_limit IS NULL THEN NULL
           WHEN coalesce((SELECT max(c.used) FROM counted c), 0) < p_limit THEN p_now
           ELSE (SELECT mailroom._from_epoch_us((min(c.s) + 51) * w.res)
                 FROM counted c, w WHERE c.used - c.cum <= p_limit - 1
                 GROUP BY w.res)
         END
$$;
ALTER FUNCTION mailroom._rate_free_at(bigint[], integer[], integer, interval, timestamptz) OWNER TO mailroom_owner;
REVOKE ALL ON FUNCTION mailroom._rate_free_at(bigint[], integer[], integer, interval, timestamptz) FROM PUBLIC;
COMMENT ON FUNCTION mailroom._rate_free_at(bigint[], integer[], integer, interval, timestamptz) IS
  'Internal: the first instant from p_now on at which a sliding-window row allows one more hit; NULL without a limit.';

-- A domain window's sends per slot, from its cumulative counts (see
-- mailroom.domain_budgets), for _rate_free_at.
CREATE FUNCTION mailroom._window_hits(p_counts bigint[]) RETURNS integer[]
LANGUAGE sql
IMMUTABLE
PARALLEL SAFE
AS $$
  SELECT coalesce(array_agg((p_counts[i + 1] - p_counts[i])::integer ORDER BY i), '{}')
  FROM generate_series(1, cardinality(p_counts) - 1) AS i
$$;
ALTER FUNCTION mailroom._window_hits(bigint[]) OWNER TO mailroom_owner;
REVOKE ALL ON FUNCTION mailroom._window_hits(bigint[]) FROM PUBLIC;
COMMENT ON FUNCTION mailroom._window_hits(bigint[]) IS
  'Internal: the sends in each slot of a domain window, from its cumulative counts (domain_budgets.second_counts, minute_counts).';

CREATE FUNCTION mailroom._send_rate_retry_after(
  p_sender text DEFAULT NULL,
  p_now    timestamptz DEFAULT now()
) RETURNS interval
LANGUAGE plpgsql
STABLE
SECURITY DEFINER
SET search_path = mailroom, pg_temp
AS $$
DECLARE
  v_at timestamptz;
  v_def_second integer;
  v_def_minute integer;
BEGIN
  SELECT d.max_per_second, d.max_per_minute INTO v_def_second, v_def_minute
  FROM mailroom.domain_limits d WHERE d.domain = '*';

  WITH budgets AS (
    -- limited senders this claim would serve
    SELECT greatest(
             mailroom._rate_free_at(rs.slots, rs.slot_hits, s.max_per_second, interval '1 second', p_now),
             mailroom._rate_free_at(rm.slots, rm.slot_hits, s.max_per_minute, interval '1 minute', p_now)) AS free_at,
           true AS is_sender
    FROM mailroom.senders s
    LEFT JOIN mailroom.rate_limits rs ON rs.key = 'mailroom/sender/' || s.name || '/s' AND rs.algorithm = 'sliding'
    LEFT JOIN mailroom.rate_limits rm ON rm.key = 'mailroom/sender/' || s.name || '/m' AND rm.algorithm = 'sliding'
    WHERE (p_sender IS NULL OR s.name = p_sender)
      AND (s.max_per_second IS NOT NULL OR s.max_per_minute IS NOT NULL)
    UNION ALL
    -- domains with recent sends (a domain without any is not holding mail back)
    SELECT greatest(
             mailroom._rate_free_at(b.second_slots, mailroom._window_hits(b.second_counts), lim.per_second,
                                    interval '1 second', p_now),
             mailroom._rate_free_at(b.minute_slots, mailroom._window_hits(b.minute_counts), lim.per_minute,
                                    interval '1 minute', p_now)),
           false
    FROM mailroom.domain_budgets b
    LEFT JOIN mailroom.domain_limits e ON e.domain = b.domain
    CROSS JOIN LATERAL (SELECT CASE WHEN e.domain IS NULL THEN v_def_second ELSE e.max_per_second END AS per_second,
                               CASE WHEN e.domain IS NULL THEN v_def_minute ELSE e.max_per_minute END AS per_minute) AS lim
    WHERE b.expires_at > p_now
  )
  -- Only exhausted budgets hold mail back. If the claim's own sender is
  -- exhausted nothing can come before it frees; otherwise the first exhausted
  -- budget to free may release mail. None exhausted: the queue is simply empty.
  SELECT CASE
           WHEN p_sender IS NOT NULL AND bool_or(b.is_sender) THEN max(b.free_at) FILTER (WHERE b.is_sender)
           ELSE min(b.free_at)
         END
    INTO v_at
  FROM budgets b
  WHERE b.free_at > p_now;

  RETURN v_at - p_now;
END
$$;
ALTER FUNCTION mailroom._send_rate_retry_after(text, timestamptz) OWNER TO mailroom_owner;
REVOKE ALL ON FUNCTION mailroom._send_rate_retry_after(text, timestamptz) FROM PUBLIC;
COMMENT ON FUNCTION mailroom._send_rate_retry_after(text, timestamptz) IS
  'Owner-only twin of send_rate_retry_after with a pinned clock (tests). For runners whose claim came back short: NULL when no send-rate budget is exhausted (the queue is just empty: idle as usual); otherwise how long until the first exhausted budget (p_sender''s own if it is exhausted, else any limited sender''s or domain''s) allows more. Claim again after that instead of the full poll interval.';


CREATE FUNCTION mailroom.send_rate_retry_after(p_sender text DEFAULT NULL)
RETURNS interval
LANGUAGE sql
STABLE
SECURITY DEFINER
SET search_path = mailroom, pg_temp
AS $$ SELECT mailroom._send_rate_retry_after(p_sender, now()) $$;
ALTER FUNCTION mailroom.send_rate_retry_after(text) OWNER TO mailroom_owner;
REVOKE ALL ON FUNCTION mailroom.send_rate_retry_after(text) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION mailroom.send_rate_retry_after(text) TO mailroom_runner;
COMMENT ON FUNCTION mailroom.send_rate_retry_after(text) IS
  'For runners whose claim came back short: NULL when no send-rate budget is exhausted (the queue is just empty: idle as usual); otherwise how long until the first exhausted budget (p_sender''s own if it is exhausted, else any limited sender''s or domain''s) allows more. Claim again after that instead of the full poll interval.';

COMMIT;
