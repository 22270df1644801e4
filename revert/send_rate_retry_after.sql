-- Revert mailroom:send_rate_retry_after from pg (back to v0.3.0: p_now on the
-- public function, domain budgets read from mailroom.rate_limits)

BEGIN;

DROP FUNCTION mailroom.send_rate_retry_after(text);
DROP FUNCTION mailroom._send_rate_retry_after(text, timestamptz);
DROP FUNCTION mailroom._window_hits(bigint[]);

-- The v0.3.0 function, as deploy/send_rate_retry_after@v0.3.0.sql defines it.
CREATE FUNCTION mailroom.send_rate_retry_after(
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
             mailroom._rate_free_at(r.slots, r.slot_hits, lim.per_second, interval '1 second', p_now),
             mailroom._rate_free_at(rm.slots, rm.slot_hits, lim.per_minute, interval '1 minute', p_now)),
           false
    FROM (SELECT DISTINCT left(substr(x.key, 17), -2) AS domain FROM mailroom.rate_limits x
          WHERE starts_with(x.key, 'mailroom/domain/')) AS dom
    LEFT JOIN mailroom.domain_limits e ON e.domain = dom.domain
    CROSS JOIN LATERAL (SELECT CASE WHEN e.domain IS NULL THEN v_def_second ELSE e.max_per_second END AS per_second,
                               CASE WHEN e.domain IS NULL THEN v_def_minute ELSE e.max_per_minute END AS per_minute) AS lim
    LEFT JOIN mailroom.rate_limits r ON r.key = 'mailroom/domain/' || dom.domain || '/s' AND r.algorithm = 'sliding'
    LEFT JOIN mailroom.rate_limits rm ON rm.key = 'mailroom/domain/' || dom.domain || '/m' AND rm.algorithm = 'sliding'
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
ALTER FUNCTION mailroom.send_rate_retry_after(text, timestamptz) OWNER TO mailroom_owner;
REVOKE ALL ON FUNCTION mailroom.send_rate_retry_after(text, timestamptz) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION mailroom.send_rate_retry_after(text, timestamptz) TO mailroom_runner;
COMMENT ON FUNCTION mailroom.send_rate_retry_after(text, timestamptz) IS
  'For runners whose claim came back short: NULL when no send-rate budget is exhausted (the queue is just empty: idle as usual); otherwise how long until the first exhausted budget (p_sender''s own if it is exhausted, else any limited sender''s or domain''s) allows more. Claim again after that instead of the full poll interval.';

COMMIT;
