-- Deploy mailroom:rate_limit_sliding to pg (rework for v0.4)
-- requires: rate_limit_sliding@v0.3.0
-- requires: split_messages
--
-- Issue 13, item 4: no p_now on anything a role can execute. rate_limit_sliding
-- judges a hit by the database clock, now() (the old default). No twin: the
-- body around _rate_sliding_take is an argument check and a rename, so tests
-- pin the clock on _rate_sliding_take itself (owner-only, as before) and call
-- rate_limit_sliding at now(). _rate_sliding_take is unchanged (send_rates and
-- claim_batch call it with their own clock), copied here verbatim so this
-- file defines every function of the change.

BEGIN;

-- The sliding window, exact in one direction: a window is cut into 50 slots
-- (window / 50 long, counted from the Unix epoch) and each grant is recorded
-- in the slot of its p_now. A request in slot j is judged against everything
-- granted in slots >= j - 50: a span one window long ending at any instant of
-- slot j lies inside those slots, so NO span one window long ever holds more
-- than the limit. The price is a little caution: under sustained pressure the
-- rate is about limit / (window + window/50), 2% under the limit.
-- Grants that reach the row out of time order (p_now is taken before the row
-- lock) are counted correctly up to one window late; older calls are denied.
CREATE OR REPLACE FUNCTION mailroom._rate_sliding_take(
  p_key         text,
  p_want        integer,
  p_limit       integer,
  p_window      interval,
  p_now         timestamptz,
  OUT granted     integer,
  OUT remaining   integer,
  OUT retry_after interval
)
LANGUAGE plpgsql
VOLATILE
SECURITY DEFINER
SET search_path = mailroom, pg_temp
AS $$
DECLARE
  c_slots   CONSTANT integer := 50;
  v_res     bigint;          -- slot length in microseconds
  v_j       bigint;          -- slot of p_now
  v_row     mailroom.rate_limits;
  v_top     bigint;
  v_slots   bigint[];
  v_hits    integer[];
  v_used    integer;
  v_cum     integer := 0;
  v_i       integer;
BEGIN
  v_res := ceil((extract(epoch FROM p_window) * 1000000)::bigint::numeric / c_slots)::bigint;
  v_j := floor(mailroom._epoch_us(p_now)::numeric / v_res)::bigint;

  SELECT * INTO v_row FROM mailroom.rate_limits WHERE key = p_key FOR UPDATE;
  IF NOT FOUND THEN
    INSERT INTO mailroom.rate_limits (key, algorithm, window_length, hits, slots, slot_hits, expires_at)
    VALUES (p_key, 'sliding', p_window, 0, '{}', '{}', p_now)
    ON CONFLICT (key) DO NOTHING;
    SELECT * INTO v_row FROM mailroom.rate_limits WHERE key = p_key FOR UPDATE;
  END IF;
  IF v_row.algorithm <> 'sliding' OR v_row.window_length <> p_window THEN
    v_row.slots := '{}';
    v_row.slot_hits := '{}';
  END IF;

  v_top := greatest(v_j, coalesce(v_row.slots[cardinality(v_row.slots)], v_j));
  IF v_j < v_top - c_slots THEN
    -- More than a window older than the newest grant: pruned state cannot judge it.
    granted := 0; remaining := 0; retry_after := interval '0';
    RETURN;
  END IF;

  -- Keep two windows of slots (for late callers), count the last one.
  SELECT coalesce(array_agg(u.s ORDER BY u.s), '{}'),
         coalesce(array_agg(u.h ORDER BY u.s), '{}'),
         coalesce(sum(u.h) FILTER (WHERE u.s >= v_j - c_slots), 0)
    INTO v_slots, v_hits, v_used
    FROM unnest(v_row.slots, v_row.slot_hits) AS u(s, h)
   WHERE u.s >= v_top - 2 * c_slots AND u.h > 0;

  IF p_want >= 0 THEN
    granted := greatest(least(p_want, p_limit - v_used), 0);
  ELSE
    -- A refund (claim_batch hands back what it reserved but did not claim):
    -- only hits granted in this very slot can be taken back.
    SELECT -least(-p_want, coalesce(max(u.h), 0))
      INTO granted
      FROM unnest(v_slots, v_hits) AS u(s, h)
     WHERE u.s = v_j;
  END IF;
  remaining := greatest(p_limit - v_used - granted, 0);

  IF granted <> 0 THEN
    SELECT array_agg(x.s ORDER BY x.s), array_agg(x.h ORDER BY x.s)
      INTO v_slots, v_hits
      FROM (SELECT u.s, sum(u.h)::integer AS h
              FROM (SELECT * FROM unnest(v_slots, v_hits)
                    UNION ALL SELECT v_j, granted) AS u(s, h)
             GROUP BY u.s) AS x
     WHERE x.h > 0;
    v_slots := coalesce(v_slots, '{}');
    v_hits := coalesce(v_hits, '{}');
  END IF;

  IF granted <> 0 OR v_row.slots IS DISTINCT FROM v_slots OR v_row.algorithm <> 'sliding' THEN
    UPDATE mailroom.rate_limits
       SET algorithm = 'sliding',
           window_length = p_window,
           window_start = NULL,
           hits = v_used + granted,
           slots = v_slots,
           slot_hits = v_hits,
           expires_at = CASE WHEN cardinality(v_slots) = 0 THEN p_now
                             ELSE mailroom._from_epoch_us((v_slots[cardinality(v_slots)] + c_slots + 1) * v_res)
                        END
     WHERE key = p_key;
  END IF;

  -- When does the next single hit fit? When enough of the oldest counted slots
  -- have slid out of the window.
  IF p_want > 0 AND granted < p_want THEN
    retry_after := NULL;
    IF p_limit > 0 THEN
      FOR v_i IN 1 .. cardinality(v_slots) LOOP
        CONTINUE WHEN v_slots[v_i] < v_j - c_slots;
        v_cum := v_cum + v_hits[v_i];
        IF v_used + granted - v_cum <= p_limit - 1 THEN
          retry_after := mailroom._from_epoch_us((v_slots[v_i] + c_slots + 1) * v_res) - p_now;
          EXIT;
        END IF;
      END LOOP;
    END IF;
  ELSE
    retry_after := interval '0';
  END IF;
END
$$;

ALTER FUNCTION mailroom._rate_sliding_take(text, integer, integer, interval, timestamptz) OWNER TO mailroom_owner;
REVOKE ALL ON FUNCTION mailroom._rate_sliding_take(text, integer, integer, interval, timestamptz) FROM PUBLIC;
COMMENT ON FUNCTION mailroom._rate_sliding_take(text, integer, integer, interval, timestamptz) IS
  'Internal: take up to p_want hits (0 = look only; negative = give back hits taken in the same slot) from the sliding-window limit p_limit per p_window of p_key, locking its row until commit. Returns how many were granted, how many remain, and when the next hit fits (NULL: never, for p_limit 0).';

DROP FUNCTION mailroom.rate_limit_sliding(text, integer, interval, timestamptz);

CREATE FUNCTION mailroom.rate_limit_sliding(
  p_key    text,
  p_limit  integer,
  p_window interval,
  OUT allowed     boolean,
  OUT remaining   integer,
  OUT retry_after interval
)
LANGUAGE plpgsql
VOLATILE
SECURITY DEFINER
SET search_path = mailroom, pg_temp
AS $$
DECLARE
  v_take record;
BEGIN
  PERFORM mailroom._rate_check_args(p_key, p_limit, p_window);
  v_take := mailroom._rate_sliding_take(p_key, 1, p_limit, p_window, now());
  allowed := v_take.granted = 1;
  remaining := v_take.remaining;
  retry_after := v_take.retry_after;
END
$$;

ALTER FUNCTION mailroom.rate_limit_sliding(text, integer, interval) OWNER TO mailroom_owner;
REVOKE ALL ON FUNCTION mailroom.rate_limit_sliding(text, integer, interval) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION mailroom.rate_limit_sliding(text, integer, interval) TO mailroom_app;

COMMENT ON FUNCTION mailroom.rate_limit_sliding(text, integer, interval) IS
  'Sliding-window limiter: count one hit on p_key if it fits, judged by the database clock now(). Never more than p_limit hits are allowed in ANY span of p_window (judged in slots of p_window / 50, so sustained throughput is about 2% under p_limit). Returns (allowed, remaining, retry_after). Costs a row lock, a read and a write per call. On a database error the CALLER decides: fail open or fail closed - see docs/cache-and-rate-limits.md.';

COMMIT;
