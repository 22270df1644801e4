-- Deploy mailroom:send_rates to pg
-- requires: table_senders
-- requires: table_domain_limits
-- requires: rate_limit_sliding

BEGIN;

-- Send rates live in mailroom.rate_limits under reserved keys, as sliding
-- windows (never more than the limit in any span of the window):
--   mailroom/sender/<name>/s, mailroom/sender/<name>/m   per sender
--   mailroom/domain/<domain>/s, mailroom/domain/<domain>/m   per recipient domain
-- claim_batch (deploy/claim_batch.sql) reads them before it claims and
-- records what it claimed, in the same transaction.

-- Pure arithmetic over a row's slots: what _rate_sliding_take would report
-- as remaining at p_now, without locking or writing. Plain SQL (no SECURITY
-- DEFINER, no SET): it reads no table and calls only qualified functions.
CREATE FUNCTION mailroom._rate_sliding_remaining(
  p_slots  bigint[],
  p_hits   integer[],
  p_limit  integer,
  p_window interval,
  p_now    timestamptz
) RETURNS integer
LANGUAGE sql
IMMUTABLE
PARALLEL SAFE
AS $$
  SELECT CASE
           WHEN p_limit IS NULL THEN NULL
           ELSE greatest(p_limit - coalesce(
                  (SELECT CASE WHEN max(u.s) - 50 > x.j THEN p_limit  -- too late to judge: nothing
                               ELSE sum(u.h) FILTER (WHERE u.s >= x.j - 50) END
                     FROM unnest(p_slots, p_hits) AS u(s, h)), 0), 0)::integer
         END
    FROM (SELECT floor(mailroom._epoch_us(p_now)::numeric
                       / ceil((extract(epoch FROM p_window) * 1000000)::bigint::numeric / 50))::bigint AS j) AS x
$$;
ALTER FUNCTION mailroom._rate_sliding_remaining(bigint[], integer[], integer, interval, timestamptz) OWNER TO mailroom_owner;
REVOKE ALL ON FUNCTION mailroom._rate_sliding_remaining(bigint[], integer[], integer, interval, timestamptz) FROM PUBLIC;
COMMENT ON FUNCTION mailroom._rate_sliding_remaining(bigint[], integer[], integer, interval, timestamptz) IS
  'Internal: hits still available at p_now in a sliding-window row (its slots and slot_hits), as _rate_sliding_take counts them; NULL when p_limit is NULL (no limit).';

CREATE FUNCTION mailroom._send_rate_available(
  p_prefix     text,
  p_per_second integer,
  p_per_minute integer,
  p_now        timestamptz
) RETURNS integer
LANGUAGE plpgsql
VOLATILE
SECURITY DEFINER
SET search_path = mailroom, pg_temp
AS $$
DECLARE
  v_available integer;
BEGIN
  -- want 0: look only, but lock the rows until commit, so that no other claim
  -- spends the same budget before this one records what it took.
  IF p_per_second IS NOT NULL THEN
    v_available := (mailroom._rate_sliding_take(p_prefix || '/s', 0, p_per_second, interval '1 second', p_now)).remaining;
  END IF;
  IF p_per_minute IS NOT NULL THEN
    v_available := least(v_available,
      (mailroom._rate_sliding_take(p_prefix || '/m', 0, p_per_minute, interval '1 minute', p_now)).remaining);
  END IF;
  RETURN v_available;
END
$$;
ALTER FUNCTION mailroom._send_rate_available(text, integer, integer, timestamptz) OWNER TO mailroom_owner;
REVOKE ALL ON FUNCTION mailroom._send_rate_available(text, integer, integer, timestamptz) FROM PUBLIC;
COMMENT ON FUNCTION mailroom._send_rate_available(text, integer, integer, timestamptz) IS
  'Internal: how many sends the per-second and per-minute windows under p_prefix still allow at p_now (NULL: no limit); locks their rows until commit.';

CREATE FUNCTION mailroom._send_rate_take(
  p_prefix     text,
  p_n          integer,
  p_per_second integer,
  p_per_minute integer,
  p_now        timestamptz
) RETURNS void
LANGUAGE plpgsql
VOLATILE
SECURITY DEFINER
SET search_path = mailroom, pg_temp
AS $$
BEGIN
  IF p_per_second IS NOT NULL THEN
    PERFORM mailroom._rate_sliding_take(p_prefix || '/s', p_n, p_per_second, interval '1 second', p_now);
  END IF;
  IF p_per_minute IS NOT NULL THEN
    PERFORM mailroom._rate_sliding_take(p_prefix || '/m', p_n, p_per_minute, interval '1 minute', p_now);
  END IF;
END
$$;
ALTER FUNCTION mailroom._send_rate_take(text, integer, integer, integer, timestamptz) OWNER TO mailroom_owner;
REVOKE ALL ON FUNCTION mailroom._send_rate_take(text, integer, integer, integer, timestamptz) FROM PUBLIC;
COMMENT ON FUNCTION mailroom._send_rate_take(text, integer, integer, integer, timestamptz) IS
  'Internal: record p_n sends in the per-second and per-minute windows under p_prefix (claim_batch, after checking _send_rate_available in the same transaction).';

COMMIT;
