-- Deploy mailroom:send_rates to pg
-- requires: send_rates@v0.3.0
-- requires: split_messages
-- requires: table_domain_budgets

-- v0.4: claim_batch looks up and locks only the budgets of the senders and
-- domains among its candidates, one key lookup each, locked in key order (so
-- claims cannot deadlock and no claim waits for one spending other keys).
-- v0.3 took one advisory lock for every domain budget and read every
-- domain mailed within the last minute on each claim: O(recently mailed
-- domains) per claim, serialised over all runners (issue 13, hole 6).
-- _send_budgets is that lookup for senders (and hands back the rows it
-- locked, so the spend is recorded without looking them up again);
-- _domain_budgets_spend locks, judges and spends the domains' budgets, one
-- mailroom.domain_budgets row per domain with both windows, in one
-- statement; _rate_slots_add takes a fast path for the usual grant in the
-- newest slot.

BEGIN;

-- Send rates live in mailroom.rate_limits under reserved keys, as sliding
-- windows (never more than the limit in any span of the window):
--   mailroom/sender/<name>/s, mailroom/sender/<name>/m   per sender
-- and per recipient domain in mailroom.domain_budgets, one row holding both
-- windows (v0.3 kept them under mailroom/domain/<domain>/s and /m).
-- claim_batch (deploy/claim_batch.sql) reads them before it claims and
-- records what it claimed, in the same transaction.

-- Pure arithmetic over a sliding-window row's slots, as _rate_sliding_take
-- counts them, for set-based use in claim_batch (one statement for all
-- domains instead of a function call each). Plain SQL over qualified
-- pg_catalog functions, without SECURITY DEFINER or SET: they read no table,
-- and this way the planner inlines them.
CREATE OR REPLACE FUNCTION mailroom._rate_slot(p_at timestamptz, p_window interval) RETURNS bigint
LANGUAGE sql
IMMUTABLE
PARALLEL SAFE
AS $$
  SELECT floor(mailroom._epoch_us(p_at)::numeric
               / ceil((extract(epoch FROM p_window) * 1000000)::numeric / 50))::bigint
$$;
ALTER FUNCTION mailroom._rate_slot(timestamptz, interval) OWNER TO mailroom_owner;
REVOKE ALL ON FUNCTION mailroom._rate_slot(timestamptz, interval) FROM PUBLIC;
COMMENT ON FUNCTION mailroom._rate_slot(timestamptz, interval) IS
  'Internal: the sliding-window slot (window / 50 long, counted from the Unix epoch) that holds p_at.';

CREATE OR REPLACE FUNCTION mailroom._rate_slots_used(p_slots bigint[], p_hits integer[], p_slot bigint)
RETURNS TABLE (used integer, newest bigint)
LANGUAGE sql
IMMUTABLE
PARALLEL SAFE
AS $$
  SELECT coalesce(sum(u.h) FILTER (WHERE u.s >= p_slot - 50), 0)::integer, max(u.s)
  FROM unnest(p_slots, p_hits) AS u(s, h)
$$;
ALTER FUNCTION mailroom._rate_slots_used(bigint[], integer[], bigint) OWNER TO mailroom_owner;
REVOKE ALL ON FUNCTION mailroom._rate_slots_used(bigint[], integer[], bigint) FROM PUBLIC;
COMMENT ON FUNCTION mailroom._rate_slots_used(bigint[], integer[], bigint) IS
  'Internal: hits a request in slot p_slot is judged against (slots >= p_slot - 50), and the newest slot.';

-- The usual case is a grant in a row's newest slot or a later one (the slots
-- are kept ascending): then the arrays are sliced and extended, found with
-- width_bucket's binary search over the slots, without unnesting, grouping
-- or sorting them. A grant in an older slot (a claim whose clock is behind
-- one that spent since) or a give-back (p_n < 0) takes the general path.
CREATE OR REPLACE FUNCTION mailroom._rate_slots_add(p_slots bigint[], p_hits integer[], p_slot bigint, p_n integer)
RETURNS TABLE (slots bigint[], slot_hits integer[], used integer)
LANGUAGE sql
IMMUTABLE
PARALLEL SAFE
AS $$
  SELECT f.slots, f.hits,
         (SELECT coalesce(sum(h.h), 0)::integer FROM unnest(f.hits[width_bucket(p_slot - 51, f.slots) + 1:]) AS h(h))
  FROM (SELECT CASE WHEN p_slots[k.n] = p_slot THEN p_slots[k.lo:k.n] ELSE p_slots[k.lo:k.n] || p_slot END AS slots,
               CASE WHEN p_slots[k.n] = p_slot THEN p_hits[k.lo:k.n - 1] || (p_hits[k.n] + p_n)
                    ELSE p_hits[k.lo:k.n] || p_n END AS hits
        FROM (SELECT coalesce(cardinality(p_slots), 0) AS n,
                     width_bucket(p_slot - 101, coalesce(p_slots, '{}')) + 1 AS lo) AS k  -- slots kept: >= p_slot - 100
        WHERE p_n > 0 AND (k.n = 0 OR p_slots[k.n] <= p_slot)) AS f
  UNION ALL
  SELECT coalesce(array_agg(x.s ORDER BY x.s), '{}'),
         coalesce(array_agg(x.h ORDER BY x.s), '{}'),
         coalesce(sum(x.h) FILTER (WHERE x.s >= p_slot - 50), 0)::integer
  FROM (SELECT u.s, sum(u.h)::integer AS h
        FROM (SELECT t.s, t.h FROM unnest(p_slots, p_hits) AS t(s, h)
              WHERE t.s >= greatest(p_slot, (SELECT max(m.m) FROM unnest(p_slots) AS m(m))) - 100
              UNION ALL
              SELECT p_slot, p_n) AS u
        GROUP BY u.s) AS x
  WHERE x.h > 0
  HAVING NOT (p_n > 0 AND (coalesce(cardinality(p_slots), 0) = 0 OR p_slots[cardinality(p_slots)] <= p_slot))
$$;
ALTER FUNCTION mailroom._rate_slots_add(bigint[], integer[], bigint, integer) OWNER TO mailroom_owner;
REVOKE ALL ON FUNCTION mailroom._rate_slots_add(bigint[], integer[], bigint, integer) FROM PUBLIC;
COMMENT ON FUNCTION mailroom._rate_slots_add(bigint[], integer[], bigint, integer) IS
  'Internal: a row''s slots with p_n hits added in slot p_slot and slots older than two windows dropped, and the hits now in the window.';

CREATE OR REPLACE FUNCTION mailroom._send_rate_available(
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

CREATE OR REPLACE FUNCTION mailroom._send_rate_record(
  p_keys    text[],
  p_ns      integer[],
  p_windows interval[],
  p_now     timestamptz
) RETURNS void
LANGUAGE plpgsql
VOLATILE
SECURITY DEFINER
SET search_path = mailroom, pg_temp
SET enable_hashjoin = on
AS $$
DECLARE
  v_sec bigint := mailroom._rate_slot(p_now, interval '1 second');  -- once per call (see _send_budgets)
  v_min bigint := mailroom._rate_slot(p_now, interval '1 minute');
BEGIN
  -- The rows claim_batch locked (_send_budgets) exist: a plain update by
  -- key. Keys without a row (direct callers) are inserted below.
  UPDATE mailroom.rate_limits AS r
  SET (slots, slot_hits, hits) = (
        SELECT a.slots, a.slot_hits, a.used
        FROM mailroom._rate_slots_add(
               CASE WHEN r.algorithm = 'sliding' AND r.window_length = u.win THEN r.slots END,
               CASE WHEN r.algorithm = 'sliding' AND r.window_length = u.win THEN r.slot_hits END,
               u.slot, u.n) AS a),
      algorithm = 'sliding',
      window_length = u.win,
      window_start = NULL,
      expires_at = greatest(CASE WHEN r.algorithm = 'sliding' AND r.window_length = u.win THEN r.expires_at END,
                            mailroom._from_epoch_us((u.slot + 51) * u.res))
  FROM (SELECT x.key, x.n, x.win,
               CASE x.win WHEN interval '1 second' THEN v_sec WHEN interval '1 minute' THEN v_min
                          ELSE mailroom._rate_slot(p_now, x.win) END AS slot,
               CASE x.win WHEN interval '1 second' THEN 20000::bigint WHEN interval '1 minute' THEN 1200000::bigint
                          ELSE ceil((extract(epoch FROM x.win) * 1000000)::numeric / 50)::bigint END AS res
        FROM unnest(p_keys, p_ns, p_windows) AS x(key, n, win)) AS u
  WHERE r.key = u.key AND u.n > 0;
  -- Keys without a row: inserted (a concurrent insert of one is added to).
  -- The caller holds what serialises these keys (the rows _send_budgets
  -- locked) and checked the budgets at the same p_now.
  INSERT INTO mailroom.rate_limits AS r (key, algorithm, window_length, hits, slots, slot_hits, expires_at)
  SELECT i.key, 'sliding', i.win, i.n, ARRAY[i.slot], ARRAY[i.n],
         mailroom._from_epoch_us((i.slot + 51) * ceil((extract(epoch FROM i.win) * 1000000)::numeric / 50)::bigint)
  FROM (SELECT u.key, u.n, u.win, mailroom._rate_slot(p_now, u.win) AS slot
        FROM unnest(p_keys, p_ns, p_windows) AS u(key, n, win)
        WHERE u.n > 0 AND NOT EXISTS (SELECT FROM mailroom.rate_limits x WHERE x.key = u.key)) AS i
  ON CONFLICT (key) DO UPDATE
     SET (slots, slot_hits, hits) = (
           SELECT a.slots, a.slot_hits, a.used
           FROM mailroom._rate_slots_add(
                  CASE WHEN r.algorithm = 'sliding' AND r.window_length = EXCLUDED.window_length THEN r.slots END,
                  CASE WHEN r.algorithm = 'sliding' AND r.window_length = EXCLUDED.window_length THEN r.slot_hits END,
                  EXCLUDED.slots[1], EXCLUDED.slot_hits[1]) AS a),
         algorithm = 'sliding',
         window_length = EXCLUDED.window_length,
         window_start = NULL,
         expires_at = CASE WHEN r.algorithm = 'sliding' AND r.window_length = EXCLUDED.window_length
                           THEN greatest(r.expires_at, EXCLUDED.expires_at) ELSE EXCLUDED.expires_at END;
END
$$;
ALTER FUNCTION mailroom._send_rate_record(text[], integer[], interval[], timestamptz) OWNER TO mailroom_owner;
REVOKE ALL ON FUNCTION mailroom._send_rate_record(text[], integer[], interval[], timestamptz) FROM PUBLIC;
COMMENT ON FUNCTION mailroom._send_rate_record(text[], integer[], interval[], timestamptz) IS
  'Internal: record p_ns[i] sends at p_now in the sliding window p_windows[i] of key p_keys[i], for all keys in one statement (claim_batch, after checking the budgets under their locks).';

CREATE OR REPLACE FUNCTION mailroom._send_budgets(
  p_prefix     text,
  p_names      text[],
  p_per_second integer[],
  p_per_minute integer[],
  p_now        timestamptz
) RETURNS TABLE (ord bigint, available integer, second_row tid, minute_row tid)
LANGUAGE plpgsql
VOLATILE
SECURITY DEFINER
SET search_path = mailroom, pg_temp
-- A few dozen names joined to as many keys: whatever the caller disabled for
-- its own key lookups, hashing these is right.
SET enable_hashjoin = on
AS $$
DECLARE
  -- Slot numbers are numeric arithmetic over the epoch: worked out once per
  -- call for the two windows, not once per key.
  v_sec    bigint := mailroom._rate_slot(p_now, interval '1 second');
  v_min    bigint := mailroom._rate_slot(p_now, interval '1 minute');
  v_keys   text[];
  v_lims   integer[];
  v_wins   interval[];
  v_got    text[];
  v_avail  integer[];
  v_rows   tid[];
  v_absent integer;
BEGIN
  -- The limited windows of the names: a key per window that has a limit (a
  -- missing per-second limit costs no row), each once, in key order; and how
  -- many of them have no row yet.
  SELECT coalesce(array_agg(k.key ORDER BY k.key COLLATE "C"), '{}'), coalesce(array_agg(k.lim ORDER BY k.key COLLATE "C"), '{}'),
         coalesce(array_agg(k.win ORDER BY k.key COLLATE "C"), '{}'),
         count(*) FILTER (WHERE NOT EXISTS (SELECT FROM mailroom.rate_limits x WHERE x.key = k.key))
    INTO v_keys, v_lims, v_wins, v_absent
  FROM (SELECT DISTINCT p_prefix || u.name || w.suffix AS key, w.lim, w.win
        FROM unnest(p_names, p_per_second, p_per_minute) AS u(name, s, m)
        CROSS JOIN LATERAL (VALUES ('/s', u.s, interval '1 second'), ('/m', u.m, interval '1 minute'))
          AS w(suffix, lim, win)
        WHERE w.lim IS NOT NULL) AS k;

  -- A key without a row gets one before anything is locked, so that the
  -- first send to a new domain is counted exactly with nothing to lock over
  -- all domains (a concurrent insert of the same key waits for this one, or
  -- this one for it). Inserting only after locking could deadlock against
  -- another claim whose insertion waits behind those locks; a subtransaction
  -- to give the locks back would make every later update of a locked row
  -- create a MultiXact. Then every row is locked in key order (claims
  -- cannot deadlock: the keys' lookups, each locking its row, run in the
  -- order of v_keys, the table's key order) until commit and judged: FOR UPDATE returns each row's
  -- newest committed version and its ctid, under which the caller records
  -- the spend without another key lookup (nobody else can change the row
  -- until this transaction ends). A row the sweep removed in between is
  -- inserted and locked on a second pass. Each key is its own lookup (a
  -- LATERAL subquery): joined to the table instead, this function's
  -- enable_hashjoin let a generic plan made while rate_limits looked empty
  -- (statistics left by a sweep) hash the whole table on every claim, cost
  -- O(domains mailed) again (issue 13, hole 6).
  FOR v_pass IN 1 .. 2 LOOP
    IF v_absent > 0 THEN
      INSERT INTO mailroom.rate_limits AS r (key, algorithm, window_length, hits, slots, slot_hits, expires_at)
      SELECT u.k, 'sliding', u.w, 0, '{}', '{}', p_now
      FROM unnest(v_keys, v_wins) AS u(k, w)
      ORDER BY u.k
      ON CONFLICT ON CONSTRAINT rate_limits_pkey DO NOTHING;
    END IF;
    SELECT coalesce(array_agg(b.key ORDER BY b.key), '{}'),
           coalesce(array_agg(CASE WHEN b.algorithm <> 'sliding' OR b.window_length <> b.w THEN b.lim
                                   WHEN us.newest - 50 > b.slot THEN 0  -- p_now too far behind to judge
                                   ELSE greatest(b.lim - us.used, 0) END ORDER BY b.key), '{}'),
           coalesce(array_agg(b.ctid ORDER BY b.key), '{}')
      INTO v_got, v_avail, v_rows
    FROM (SELECT r.ctid, r.key, r.algorithm, r.window_length, r.slots, r.slot_hits, u.lim, u.w,
                 CASE u.w WHEN interval '1 second' THEN v_sec ELSE v_min END AS slot
          FROM unnest(v_keys, v_lims, v_wins) AS u(k, lim, w)
          CROSS JOIN LATERAL (SELECT x.ctid, x.key, x.algorithm, x.window_length, x.slots, x.slot_hits
                              FROM mailroom.rate_limits x WHERE x.key = u.k
                              FOR UPDATE) AS r) AS b
    CROSS JOIN LATERAL mailroom._rate_slots_used(b.slots, b.slot_hits, b.slot) AS us;
    v_absent := cardinality(v_keys) - cardinality(v_got);
    EXIT WHEN v_absent = 0;
  END LOOP;

  -- Per name as given (in order, repeats answered alike): what its windows
  -- still allow (NULL: no limit) and the rows to record the spend under.
  RETURN QUERY
  SELECT u.ord, min(b.avail), max(b.row_id) FILTER (WHERE b.key = u.name_s), max(b.row_id) FILTER (WHERE b.key = u.name_m)
  FROM (SELECT n.ord, p_prefix || n.name || '/s' AS name_s, p_prefix || n.name || '/m' AS name_m
        FROM unnest(p_names) WITH ORDINALITY AS n(name, ord)) AS u
  CROSS JOIN LATERAL (VALUES (u.name_s), (u.name_m)) AS k(key)
  LEFT JOIN unnest(v_got, v_avail, v_rows) AS b(key, avail, row_id) ON b.key = k.key
  GROUP BY u.ord
  ORDER BY u.ord;
END
$$;
ALTER FUNCTION mailroom._send_budgets(text, text[], integer[], integer[], timestamptz) OWNER TO mailroom_owner;
REVOKE ALL ON FUNCTION mailroom._send_budgets(text, text[], integer[], integer[], timestamptz) FROM PUBLIC;
COMMENT ON FUNCTION mailroom._send_budgets(text, text[], integer[], integer[], timestamptz) IS
  'Internal: lock the sliding-window rows p_prefix || p_names[i] || ''/s'' and ''/m'' that have a limit (created when missing) in key order until commit; for each name in order, what its windows still allow at p_now (NULL: no limit) and the ctid of each window''s row, to record the spend under. claim_batch calls it for the senders and domains of its candidates only.';

-- Domains: one mailroom.domain_budgets row each holds both windows, each as
-- its slots and cumulative counts, so that judging and spending a window is
-- a few expressions (width_bucket's binary search and array slices) and no
-- subquery per row. Plain SQL without SECURITY DEFINER or SET, inlined into
-- _domain_budgets_spend.
CREATE FUNCTION mailroom._window_available(p_slots bigint[], p_counts bigint[], p_slot bigint, p_limit integer)
RETURNS bigint
LANGUAGE sql
IMMUTABLE
PARALLEL SAFE
AS $$
  SELECT CASE WHEN p_limit IS NULL THEN NULL
              WHEN p_slots[cardinality(p_slots)] - 50 > p_slot THEN 0  -- p_slot too far behind to judge
              ELSE greatest(p_limit - (p_counts[cardinality(p_counts)]
                                       - p_counts[width_bucket(p_slot - 51, p_slots) + 1]), 0) END
$$;
ALTER FUNCTION mailroom._window_available(bigint[], bigint[], bigint, integer) OWNER TO mailroom_owner;
REVOKE ALL ON FUNCTION mailroom._window_available(bigint[], bigint[], bigint, integer) FROM PUBLIC;
COMMENT ON FUNCTION mailroom._window_available(bigint[], bigint[], bigint, integer) IS
  'Internal: what a domain window (slots, cumulative counts) still allows a request in slot p_slot under p_limit (NULL: no limit): p_limit less the sends in slots >= p_slot - 50.';

CREATE FUNCTION mailroom._window_used(p_slots bigint[], p_counts bigint[], p_slot bigint)
RETURNS bigint
LANGUAGE sql
IMMUTABLE
PARALLEL SAFE
AS $$ SELECT p_counts[cardinality(p_counts)] - p_counts[width_bucket(p_slot - 51, p_slots) + 1] $$;
ALTER FUNCTION mailroom._window_used(bigint[], bigint[], bigint) OWNER TO mailroom_owner;
REVOKE ALL ON FUNCTION mailroom._window_used(bigint[], bigint[], bigint) FROM PUBLIC;
COMMENT ON FUNCTION mailroom._window_used(bigint[], bigint[], bigint) IS
  'Internal: the sends a domain window (slots, cumulative counts) holds in slots >= p_slot - 50.';

-- Adding p_n sends in slot p_slot: slots older than two windows are cut off
-- (slice from width_bucket), the slot is appended or its count raised. A
-- claim whose clock is behind the window's newest slot (it started before
-- another claim that spent since) records in that newest slot: its sends
-- then leave the window a little later than they could, never earlier.
CREATE FUNCTION mailroom._window_add_slots(p_slots bigint[], p_slot bigint, p_n bigint)
RETURNS bigint[]
LANGUAGE sql
IMMUTABLE
PARALLEL SAFE
AS $$
  SELECT CASE WHEN p_n = 0 THEN p_slots
              WHEN p_slots[cardinality(p_slots)] >= p_slot
                THEN p_slots[width_bucket(p_slots[cardinality(p_slots)] - 101, p_slots) + 1:]
              ELSE p_slots[width_bucket(p_slot - 101, p_slots) + 1:] || p_slot END
$$;
ALTER FUNCTION mailroom._window_add_slots(bigint[], bigint, bigint) OWNER TO mailroom_owner;
REVOKE ALL ON FUNCTION mailroom._window_add_slots(bigint[], bigint, bigint) FROM PUBLIC;
COMMENT ON FUNCTION mailroom._window_add_slots(bigint[], bigint, bigint) IS
  'Internal: a domain window''s slots after p_n sends in slot p_slot (or in its newest slot, if that is later), slots older than two windows dropped.';

CREATE FUNCTION mailroom._window_add_counts(p_slots bigint[], p_counts bigint[], p_slot bigint, p_n bigint)
RETURNS bigint[]
LANGUAGE sql
IMMUTABLE
PARALLEL SAFE
AS $$
  SELECT CASE WHEN p_n = 0 THEN p_counts
              WHEN p_slots[cardinality(p_slots)] >= p_slot
                THEN p_counts[width_bucket(p_slots[cardinality(p_slots)] - 101, p_slots) + 1:cardinality(p_slots)]
                     || (p_counts[cardinality(p_counts)] + p_n)
              ELSE p_counts[width_bucket(p_slot - 101, p_slots) + 1:] || (p_counts[cardinality(p_counts)] + p_n) END
$$;
ALTER FUNCTION mailroom._window_add_counts(bigint[], bigint[], bigint, bigint) OWNER TO mailroom_owner;
REVOKE ALL ON FUNCTION mailroom._window_add_counts(bigint[], bigint[], bigint, bigint) FROM PUBLIC;
COMMENT ON FUNCTION mailroom._window_add_counts(bigint[], bigint[], bigint, bigint) IS
  'Internal: a domain window''s cumulative counts after p_n sends, as _window_add_slots adds them.';

-- A claim spends its domains in one statement: each limited domain's row
-- is inserted or, if it exists, locked and updated (INSERT ... ON CONFLICT
-- DO UPDATE, in domain order, so claims cannot deadlock: a new domain's
-- insertion blocks a concurrent one like a lock), judged against both
-- windows under that lock and charged with what it grants, which RETURNING
-- hands back. One key lookup per domain; no separate lock, judge and spend
-- statements.
CREATE FUNCTION mailroom._domain_budgets_spend(
  p_domains    text[],
  p_per_second integer[],
  p_per_minute integer[],
  p_now        timestamptz,
  p_n          integer DEFAULT 1
) RETURNS TABLE (domain text, granted integer)
LANGUAGE plpgsql
VOLATILE
SECURITY DEFINER
SET search_path = mailroom, pg_temp
AS $$
#variable_conflict use_column
DECLARE
  v_sec bigint := mailroom._rate_slot(p_now, interval '1 second');
  v_min bigint := mailroom._rate_slot(p_now, interval '1 minute');
BEGIN
  RETURN QUERY
  INSERT INTO mailroom.domain_budgets AS b
         (domain, second_slots, second_counts, minute_slots, minute_counts, per_second, per_minute, granted, expires_at)
  SELECT w.domain,
         CASE WHEN w.per_second IS NOT NULL AND w.n > 0 THEN ARRAY[v_sec] ELSE '{}' END,
         CASE WHEN w.per_second IS NOT NULL AND w.n > 0 THEN ARRAY[0, w.n] ELSE '{0}' END,
         CASE WHEN w.per_minute IS NOT NULL AND w.n > 0 THEN ARRAY[v_min] ELSE '{}' END,
         CASE WHEN w.per_minute IS NOT NULL AND w.n > 0 THEN ARRAY[0, w.n] ELSE '{0}' END,
         w.per_second, w.per_minute, w.n,
         -- both windows empty 51 slots after this one (a slot is 20 ms, 1.2 s)
         mailroom._from_epoch_us(greatest(CASE WHEN w.per_second IS NOT NULL THEN (v_sec + 51) * 20000 END,
                                          CASE WHEN w.per_minute IS NOT NULL THEN (v_min + 51) * 1200000 END))
  FROM (SELECT u.d AS domain, min(u.s) AS per_second, min(u.m) AS per_minute,
               -- What a fresh row could grant; a row that exists grants no more than its windows allow.
               (CASE WHEN p_n < 0 THEN count(*) * p_n ELSE least(count(*) * p_n, min(u.s), min(u.m)) END)::integer AS n
        FROM unnest(p_domains, p_per_second, p_per_minute) AS u(d, s, m)
        WHERE u.d IS NOT NULL AND (u.s IS NOT NULL OR u.m IS NOT NULL)
        GROUP BY u.d) AS w
  ORDER BY w.domain
  ON CONFLICT ON CONSTRAINT domain_budgets_pkey DO UPDATE
  SET (second_slots, second_counts, minute_slots, minute_counts, per_second, per_minute, granted, expires_at) = (
        SELECT mailroom._window_add_slots(b.second_slots, v_sec, g.s),
               mailroom._window_add_counts(b.second_slots, b.second_counts, v_sec, g.s),
               mailroom._window_add_slots(b.minute_slots, v_min, g.m),
               mailroom._window_add_counts(b.minute_slots, b.minute_counts, v_min, g.m),
               EXCLUDED.per_second, EXCLUDED.per_minute, g.n,
               CASE WHEN g.n > 0 THEN greatest(b.expires_at, EXCLUDED.expires_at) ELSE b.expires_at END
        FROM (SELECT n.n, CASE WHEN EXCLUDED.per_second IS NULL THEN 0 ELSE n.n END AS s,
                     CASE WHEN EXCLUDED.per_minute IS NULL THEN 0 ELSE n.n END AS m
              FROM (SELECT CASE WHEN EXCLUDED.granted < 0 THEN EXCLUDED.granted  -- a give-back, unjudged
                                ELSE least(EXCLUDED.granted,
                                           mailroom._window_available(b.second_slots, b.second_counts, v_sec, EXCLUDED.per_second),
                                           mailroom._window_available(b.minute_slots, b.minute_counts, v_min, EXCLUDED.per_minute))
                           END AS n
                    OFFSET 0) AS n  -- not pulled up: the grant is worked out once per row,
              OFFSET 0) AS g)       -- and the window functions' arguments stay plain columns (inlined)
  RETURNING b.domain, b.granted;
END
$$;
ALTER FUNCTION mailroom._domain_budgets_spend(text[], integer[], integer[], timestamptz, integer) OWNER TO mailroom_owner;
REVOKE ALL ON FUNCTION mailroom._domain_budgets_spend(text[], integer[], integer[], timestamptz, integer) FROM PUBLIC;
COMMENT ON FUNCTION mailroom._domain_budgets_spend(text[], integer[], integer[], timestamptz, integer) IS
  'Internal: spend p_n sends at p_now for each element of p_domains (its domain''s limits in p_per_second, p_per_minute; NULL domains and unlimited ones are skipped): per domain, as many as both its windows allow (a negative p_n gives that many back, unjudged), recorded in its mailroom.domain_budgets row, locked until commit. Returns what each domain granted. claim_batch calls it for its candidates'' domains.';

COMMIT;
