-- Deploy mailroom_fleet:domain_limits to pg
-- requires: schema
-- requires: enqueue

-- A domain send limit that holds across the fleet. Each shard enforces its
-- own mailroom.domain_limits at claim time (a sliding window per second and
-- per minute, counted over every runner of that shard); the directory gives
-- each shard a share of the fleet's limit, so that the shards' limits add up
-- to no more than it, and moves the shares after the mail: a rebalance reads
-- each shard's demand (mailroom.domain_demand: mail due within a minute),
-- keeps a floor for every shard and splits the rest in proportion to demand.
--
-- The promise (docs/fleet.md): in every span of one second (of one minute),
-- the claims for the domain summed over all shards that hold a share are at
-- most per_second (per_minute). That needs two things besides shares that add
-- up:
--
-- 1. A shard's limit is only ever raised up to a ceiling the directory has
--    already committed, with every ceiling of the domain adding up to the
--    limit. PL/Proxy writes each shard in autocommit, outside the directory's
--    transaction: a rebalance that fails or is rolled back after writing may
--    leave any shard at its new or its old value, and both are within the
--    ceilings committed before. A shard that does not answer keeps its
--    ceiling, counted against the limit, whatever it does meanwhile.
-- 2. A raise waits one window (1 s, 1 min) after the last rebalance that
--    lowered a shard: a shard's window still holds what it claimed under its
--    old, higher limit, so raising another shard at once would let a span
--    that straddles the change hold both. Lowers apply at once.
-- So a share that falls follows demand at the next rebalance, a share that
-- rises at the first one a window after the lowers that made room.

BEGIN;

CREATE TABLE mailroom_fleet.domain_limits (
  domain     text NOT NULL,
  per_second integer,
  per_minute integer,
  updated_at timestamptz NOT NULL DEFAULT now(),
  -- When a rebalance last lowered a shard's share of each window: raises of
  -- that window wait until one window after it.
  second_lowered_at timestamptz,
  minute_lowered_at timestamptz,
  rebalanced_at     timestamptz,
  CONSTRAINT domain_limits_pkey PRIMARY KEY (domain),
  CONSTRAINT domain_limits_some_limit CHECK (per_second IS NOT NULL OR per_minute IS NOT NULL),
  CONSTRAINT domain_limits_per_second_range CHECK (per_second BETWEEN 1 AND 1000000),
  CONSTRAINT domain_limits_per_minute_range CHECK (per_minute BETWEEN 1 AND 60000000)
);
ALTER TABLE mailroom_fleet.domain_limits OWNER TO mailroom_fleet_owner;
REVOKE ALL ON mailroom_fleet.domain_limits FROM PUBLIC;
COMMENT ON TABLE mailroom_fleet.domain_limits IS
  'Fleet-wide send rates per recipient domain (the shards'' key: lower case, A-labels), shared out among the shards by rebalance_domain_limits. Set with set_domain_limit, read with list_domain_limits.';

-- One row per domain and shard that has been given a share: what was set
-- there, and the ceiling that bounds it (a shard's limit is never above its
-- ceiling; the ceilings of a domain add up to no more than its limit).
CREATE TABLE mailroom_fleet.domain_shares (
  domain            text NOT NULL REFERENCES mailroom_fleet.domain_limits ON DELETE CASCADE,
  shard             text NOT NULL,
  per_second        integer,
  per_minute        integer,
  ceiling_second    integer,
  ceiling_minute    integer,
  demand            bigint NOT NULL DEFAULT 0,
  answered_at       timestamptz NOT NULL,
  CONSTRAINT domain_shares_pkey PRIMARY KEY (domain, shard)
);
ALTER TABLE mailroom_fleet.domain_shares OWNER TO mailroom_fleet_owner;
REVOKE ALL ON mailroom_fleet.domain_shares FROM PUBLIC;
COMMENT ON TABLE mailroom_fleet.domain_shares IS
  'Each shard''s share of a fleet domain limit: the limits last set on it, the ceilings that bound them, its demand (due mail) and when it last answered a rebalance.';

-- -- PL/Proxy calls ------------------------------------------------------------

-- One shard's demand and limits, on the partition given (a hash value: the
-- partition number itself), so that a rebalance asks the shards one by one
-- and goes on without one that does not answer (RUN ON ALL would fail the
-- whole read for one shard down).
CREATE FUNCTION mailroom_fleet._shard_domain_demand(p_partition integer, p_domains text[])
RETURNS TABLE (shard text, domain text, due bigint, max_per_second integer, max_per_minute integer)
LANGUAGE plproxy
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
  CLUSTER 'mailroom_fleet';
  RUN ON p_partition;
  SELECT pg_catalog.current_database()::text AS shard, d.domain, d.due, d.max_per_second, d.max_per_minute
  FROM mailroom.domain_demand(p_domains) AS d;
$$;
ALTER FUNCTION mailroom_fleet._shard_domain_demand(integer, text[]) OWNER TO mailroom_fleet_owner;
REVOKE ALL ON FUNCTION mailroom_fleet._shard_domain_demand(integer, text[]) FROM PUBLIC;
COMMENT ON FUNCTION mailroom_fleet._shard_domain_demand(integer, text[]) IS
  'Internal: mailroom.domain_demand on the shard of partition p_partition, tagged with the shard.';

-- Every shard's shares in one call: SPLIT hands each partition of
-- p_partitions its own elements of the other arrays, and PL/Proxy connects
-- to every tagged partition before it sends anything.
CREATE FUNCTION mailroom_fleet._shards_set_domain_limits(
  p_partitions integer[], p_domains text[], p_per_second integer[], p_per_minute integer[])
RETURNS TABLE (shard text, domain text)
LANGUAGE plproxy
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
  CLUSTER 'mailroom_fleet';
  SPLIT p_partitions, p_domains, p_per_second, p_per_minute;
  RUN ON p_partitions;
  SELECT pg_catalog.current_database()::text AS shard, u.d AS domain
  FROM unnest(p_domains, p_per_second, p_per_minute) AS u(d, s, m),
       LATERAL mailroom.set_domain_limits(u.d, u.s, u.m) AS done;
$$;
ALTER FUNCTION mailroom_fleet._shards_set_domain_limits(integer[], text[], integer[], integer[]) OWNER TO mailroom_fleet_owner;
REVOKE ALL ON FUNCTION mailroom_fleet._shards_set_domain_limits(integer[], text[], integer[], integer[]) FROM PUBLIC;
COMMENT ON FUNCTION mailroom_fleet._shards_set_domain_limits(integer[], text[], integer[], integer[]) IS
  'Internal: mailroom.set_domain_limits(domain, per_second, per_minute) on each partition of p_partitions with its own elements (PL/Proxy SPLIT).';

CREATE FUNCTION mailroom_fleet._shards_delete_domain_limits(p_domain text)
RETURNS TABLE (shard text, cleared boolean)
LANGUAGE plproxy
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
  CLUSTER 'mailroom_fleet';
  RUN ON ALL;
  SELECT pg_catalog.current_database()::text AS shard, mailroom.delete_domain_limits(p_domain) AS cleared;
$$;
ALTER FUNCTION mailroom_fleet._shards_delete_domain_limits(text) OWNER TO mailroom_fleet_owner;
REVOKE ALL ON FUNCTION mailroom_fleet._shards_delete_domain_limits(text) FROM PUBLIC;
COMMENT ON FUNCTION mailroom_fleet._shards_delete_domain_limits(text) IS
  'Internal: mailroom.delete_domain_limits on every shard.';

-- -- Computing shares ------------------------------------------------------------

-- A domain key as the shards compute it (mailroom._address_key's domain
-- part), refused with the field named where the shards would refuse it.
CREATE FUNCTION mailroom_fleet._limit_domain(p_domain text)
RETURNS text
LANGUAGE plpgsql IMMUTABLE
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
  v_key text;
BEGIN
  IF p_domain = '*' THEN
    RAISE EXCEPTION 'mailroom_fleet: domain: a fleet limit names one domain; the default ''*'' is set on each shard (mailroom.set_domain_limits)'
      USING ERRCODE = '22023';
  END IF;
  v_key := CASE WHEN octet_length(p_domain) = length(p_domain) THEN lower(p_domain)
                ELSE mailroom_fleet._idna_domain(p_domain) END;
  IF v_key IS NULL OR length(v_key) NOT BETWEEN 1 AND 253 OR strpos(v_key, '@') > 0 OR strpos(v_key, '/') > 0
     OR v_key !~ '^[^.\s]+(\.[^.\s]+)*$' THEN
    RAISE EXCEPTION 'mailroom_fleet: domain: must be a domain name, got %', coalesce(quote_literal(p_domain), 'NULL')
      USING ERRCODE = '22023';
  END IF;
  RETURN v_key;
END
$$;
ALTER FUNCTION mailroom_fleet._limit_domain(text) OWNER TO mailroom_fleet_owner;
REVOKE ALL ON FUNCTION mailroom_fleet._limit_domain(text) FROM PUBLIC;
COMMENT ON FUNCTION mailroom_fleet._limit_domain(text) IS
  'Internal: the shards'' key of a recipient domain (lower case; outside ASCII the UTS 46 mapping and A-labels), or 22023.';

-- p_total split among the shards: each gets p_floor, the rest in proportion
-- to its demand (evenly when nobody has any), whole numbers by largest
-- remainder, so the shares add up to exactly p_total.
CREATE FUNCTION mailroom_fleet._split(p_total integer, p_floor integer, p_shards text[], p_demand bigint[])
RETURNS TABLE (shard text, share integer)
LANGUAGE sql IMMUTABLE
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
  WITH s AS (
    SELECT u.shard, CASE WHEN sum(u.d) OVER () > 0 THEN u.d ELSE 1 END::numeric AS w
    FROM unnest(p_shards, p_demand) AS u(shard, d)
  ), r AS (
    SELECT s.shard, (p_total - p_floor * count(*) OVER ())::numeric * s.w AS part, sum(s.w) OVER () AS total_w,
           (p_total - p_floor * count(*) OVER ()) AS rest
    FROM s
  ), b AS (
    SELECT r.shard, floor(r.part / r.total_w)::integer AS base, r.part - floor(r.part / r.total_w) * r.total_w AS rem,
           r.rest
    FROM r
  ), ranked AS (
    SELECT b.shard, b.base, b.rest - sum(b.base) OVER () AS extra,
           row_number() OVER (ORDER BY b.rem DESC, b.shard) AS rank
    FROM b
  )
  SELECT ranked.shard, p_floor + ranked.base + CASE WHEN ranked.rank <= ranked.extra THEN 1 ELSE 0 END
  FROM ranked
$$;
ALTER FUNCTION mailroom_fleet._split(integer, integer, text[], bigint[]) OWNER TO mailroom_fleet_owner;
REVOKE ALL ON FUNCTION mailroom_fleet._split(integer, integer, text[], bigint[]) FROM PUBLIC;
COMMENT ON FUNCTION mailroom_fleet._split(integer, integer, text[], bigint[]) IS
  'Internal: p_total shared among p_shards: p_floor each, the rest in proportion to p_demand (evenly when all are 0), by largest remainder; the shares add up to p_total.';

-- The rebalance. p_strict: a shard that does not answer fails the call
-- before anything is written (set_domain_limit); otherwise the shards that
-- answer are rebalanced within what the others' ceilings leave, and the
-- others are reported (the pg_cron job).
CREATE FUNCTION mailroom_fleet._rebalance(p_domains text[], p_strict boolean)
RETURNS TABLE (domain text, shard text, per_second integer, per_minute integer, demand bigint, note text)
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
#variable_conflict use_column
DECLARE
  v_part      integer;
  v_domains   text[];
  v_answers   jsonb := '[]';
  v_plan      jsonb;
  v_down      text[] := '{}';
  v_lim       record;
  v_live      integer;
  v_n         integer;
  v_floor_s   integer;
  v_floor_m   integer;
  v_budget_s  integer;
  v_budget_m  integer;
  v_clock     timestamptz;
  v_raise_s   boolean;
  v_raise_m   boolean;
  v_lowered_s text[] := '{}';
  v_lowered_m text[] := '{}';
  v_parts     integer[] := '{}';
  v_wdomains  text[] := '{}';
  v_ws        integer[] := '{}';
  v_wm        integer[] := '{}';
BEGIN
  -- One rebalance of a domain at a time: the row lock orders them, and the
  -- later one sees the ceilings the earlier one committed.
  SELECT array_agg(l.domain ORDER BY l.domain) INTO v_domains
  FROM (SELECT l.domain FROM mailroom_fleet.domain_limits l
        WHERE p_domains IS NULL OR l.domain = ANY (p_domains)
        ORDER BY l.domain FOR UPDATE) AS l;
  IF v_domains IS NULL THEN
    RETURN;
  END IF;

  -- One call per shard (the lowest partition of each connect string), so one
  -- that does not answer is known and the others go on. Nothing is written
  -- before every shard has been asked.
  FOR v_part IN SELECT min(m.partition) FROM mailroom_fleet.shard_map m GROUP BY m.connstr ORDER BY 1 LOOP
    BEGIN
      v_answers := v_answers || coalesce((
        SELECT jsonb_agg(jsonb_build_object('part', v_part, 'shard', d.shard, 'domain', d.domain, 'due', d.due,
                                            'max_per_second', d.max_per_second, 'max_per_minute', d.max_per_minute))
        FROM mailroom_fleet._shard_domain_demand(v_part, v_domains) AS d), '[]');
    EXCEPTION WHEN OTHERS THEN
      IF p_strict THEN
        RAISE EXCEPTION 'mailroom_fleet: the shard of partition % did not answer, nothing was changed: %', v_part, SQLERRM
          USING ERRCODE = SQLSTATE, HINT = 'Run it again once every shard answers.';
      END IF;
      v_down := v_down || format('p%s: %s', v_part, SQLERRM);
    END;
  END LOOP;

  FOR v_lim IN SELECT l.* FROM mailroom_fleet.domain_limits l WHERE l.domain = ANY (v_domains) ORDER BY l.domain LOOP
    -- Shards with a share that did not answer keep their ceilings, counted
    -- against the limit.
    SELECT count(*) INTO v_live FROM jsonb_to_recordset(v_answers) AS a(domain text) WHERE a.domain = v_lim.domain;
    CONTINUE WHEN v_live = 0;
    SELECT v_live + count(*), v_lim.per_second - coalesce(sum(s.ceiling_second), 0),
           v_lim.per_minute - coalesce(sum(s.ceiling_minute), 0)
      INTO v_n, v_budget_s, v_budget_m
    FROM mailroom_fleet.domain_shares s
    WHERE s.domain = v_lim.domain
      AND s.shard NOT IN (SELECT a.shard FROM jsonb_to_recordset(v_answers) AS a(shard text, domain text)
                          WHERE a.domain = v_lim.domain);
    -- The floor: a tenth of the limit spread over the shards, at least 1 (a
    -- shard's limit cannot be 0: NULL there is no limit at all).
    v_floor_s := greatest(1, v_lim.per_second / (10 * v_n));
    v_floor_m := greatest(1, v_lim.per_minute / (10 * v_n));
    IF v_budget_s < v_live * v_floor_s OR v_budget_m < v_live * v_floor_m THEN
      RAISE WARNING 'mailroom_fleet: %: the limit (% per second, % per minute) leaves too little for % shards at 1 each: shares unchanged; raise the limit',
        v_lim.domain, v_lim.per_second, v_lim.per_minute, v_live;
      CONTINUE;
    END IF;

    v_clock := clock_timestamp();
    v_raise_s := v_lim.second_lowered_at IS NULL OR v_clock >= v_lim.second_lowered_at + interval '1 second';
    v_raise_m := v_lim.minute_lowered_at IS NULL OR v_clock >= v_lim.minute_lowered_at + interval '1 minute';

    WITH a AS (
      SELECT a.* FROM jsonb_to_recordset(v_answers)
             AS a(part integer, shard text, domain text, due bigint, max_per_second integer, max_per_minute integer)
      WHERE a.domain = v_lim.domain
    ), t AS (
      SELECT a.*, ts.share AS target_s, tm.share AS target_m, old.ceiling_second, old.ceiling_minute
      FROM a
      LEFT JOIN mailroom_fleet.domain_shares old ON old.domain = a.domain AND old.shard = a.shard
      LEFT JOIN mailroom_fleet._split(v_budget_s, v_floor_s, ARRAY(SELECT x.shard FROM a x ORDER BY x.shard),
                                      ARRAY(SELECT x.due FROM a x ORDER BY x.shard)) ts
             ON ts.shard = a.shard AND v_lim.per_second IS NOT NULL
      LEFT JOIN mailroom_fleet._split(v_budget_m, v_floor_m, ARRAY(SELECT x.shard FROM a x ORDER BY x.shard),
                                      ARRAY(SELECT x.due FROM a x ORDER BY x.shard)) tm
             ON tm.shard = a.shard AND v_lim.per_minute IS NOT NULL
    ), v AS (
      -- The value set now: the target, but never above the committed
      -- ceiling, and not above what is in force until a window after the
      -- last lower (least() skips NULL: no ceiling yet, no limit in force).
      SELECT t.*,
             CASE WHEN t.target_s IS NOT NULL
                  THEN least(t.target_s, t.ceiling_second, CASE WHEN NOT v_raise_s THEN t.max_per_second END) END AS value_s,
             CASE WHEN t.target_m IS NOT NULL
                  THEN least(t.target_m, t.ceiling_minute, CASE WHEN NOT v_raise_m THEN t.max_per_minute END) END AS value_m
      FROM t
    )
    SELECT jsonb_agg(jsonb_build_object(
             'part', v.part, 'shard', v.shard, 'due', v.due, 'target_s', v.target_s, 'target_m', v.target_m,
             'value_s', v.value_s, 'value_m', v.value_m,
             'lowered_s', v.value_s IS NOT NULL AND (v.max_per_second IS NULL OR v.value_s < v.max_per_second),
             'lowered_m', v.value_m IS NOT NULL AND (v.max_per_minute IS NULL OR v.value_m < v.max_per_minute))
           ORDER BY v.shard)
      INTO v_plan
    FROM v;

    SELECT v_parts || array_agg(p.part ORDER BY p.shard), v_wdomains || array_agg(v_lim.domain ORDER BY p.shard),
           v_ws || array_agg(p.value_s ORDER BY p.shard), v_wm || array_agg(p.value_m ORDER BY p.shard),
           CASE WHEN bool_or(p.lowered_s) THEN v_lowered_s || v_lim.domain ELSE v_lowered_s END,
           CASE WHEN bool_or(p.lowered_m) THEN v_lowered_m || v_lim.domain ELSE v_lowered_m END
      INTO v_parts, v_wdomains, v_ws, v_wm, v_lowered_s, v_lowered_m
    FROM jsonb_to_recordset(v_plan) AS p(part integer, shard text, value_s integer, value_m integer,
                                         lowered_s boolean, lowered_m boolean);

    -- The new ceilings (the targets) are recorded in this transaction with
    -- the writes; each value written is at most the shard's old ceiling and
    -- its new one, so whether this commits or not, every shard is within
    -- what is committed.
    INSERT INTO mailroom_fleet.domain_shares AS s
      (domain, shard, per_second, per_minute, ceiling_second, ceiling_minute, demand, answered_at)
    SELECT v_lim.domain, p.shard, p.value_s, p.value_m, p.target_s, p.target_m, p.due, now()
    FROM jsonb_to_recordset(v_plan) AS p(shard text, due bigint, target_s integer, target_m integer,
                                         value_s integer, value_m integer)
    ON CONFLICT ON CONSTRAINT domain_shares_pkey DO UPDATE
      SET per_second = EXCLUDED.per_second, per_minute = EXCLUDED.per_minute,
          ceiling_second = EXCLUDED.ceiling_second, ceiling_minute = EXCLUDED.ceiling_minute,
          demand = EXCLUDED.demand, answered_at = EXCLUDED.answered_at;
    -- Every partition answered: a share of a shard that did not is one of a
    -- shard that left the map.
    IF cardinality(v_down) = 0 THEN
      DELETE FROM mailroom_fleet.domain_shares s
      WHERE s.domain = v_lim.domain
        AND s.shard NOT IN (SELECT p.shard FROM jsonb_to_recordset(v_plan) AS p(shard text));
    END IF;
    UPDATE mailroom_fleet.domain_limits l SET rebalanced_at = now() WHERE l.domain = v_lim.domain;

    RETURN QUERY
    SELECT v_lim.domain, p.shard, p.value_s, p.value_m, p.due,
           CASE WHEN p.value_s IS DISTINCT FROM p.target_s OR p.value_m IS DISTINCT FROM p.target_m
                THEN format('raise to %s waits a window after the last lower', concat_ws(', ', p.target_s || '/s', p.target_m || '/min'))
                ELSE 'set' END
    FROM jsonb_to_recordset(v_plan) AS p(shard text, due bigint, target_s integer, target_m integer,
                                         value_s integer, value_m integer)
    UNION ALL
    SELECT v_lim.domain, s.shard, s.per_second, s.per_minute, s.demand,
           'did not answer: its share and ceiling stay as last set and count against the limit'
    FROM mailroom_fleet.domain_shares s
    WHERE s.domain = v_lim.domain AND cardinality(v_down) > 0
      AND s.shard NOT IN (SELECT p.shard FROM jsonb_to_recordset(v_plan) AS p(shard text))
    ORDER BY 2;
  END LOOP;

  IF cardinality(v_parts) > 0 THEN
    PERFORM FROM mailroom_fleet._shards_set_domain_limits(v_parts, v_wdomains, v_ws, v_wm);
    -- After the writes: from this instant the lowers are in force, and a
    -- raise waits a window from it.
    UPDATE mailroom_fleet.domain_limits l
    SET second_lowered_at = CASE WHEN l.domain = ANY (v_lowered_s) THEN clock_timestamp() ELSE l.second_lowered_at END,
        minute_lowered_at = CASE WHEN l.domain = ANY (v_lowered_m) THEN clock_timestamp() ELSE l.minute_lowered_at END
    WHERE l.domain = ANY (v_lowered_s || v_lowered_m);
  END IF;
  IF cardinality(v_down) > 0 THEN
    RAISE WARNING 'mailroom_fleet: rebalance: % shard(s) did not answer; their shares stay as last set and count against each limit: %',
      cardinality(v_down), array_to_string(v_down, '; ');
  END IF;
END
$$;
ALTER FUNCTION mailroom_fleet._rebalance(text[], boolean) OWNER TO mailroom_fleet_owner;
REVOKE ALL ON FUNCTION mailroom_fleet._rebalance(text[], boolean) FROM PUBLIC;
COMMENT ON FUNCTION mailroom_fleet._rebalance(text[], boolean) IS
  'Internal: share the limits of p_domains (NULL: all) out among the shards (rebalance_domain_limits, set_domain_limit).';

-- -- Operators' calls ------------------------------------------------------------

CREATE FUNCTION mailroom_fleet.rebalance_domain_limits(p_domain text DEFAULT NULL)
RETURNS TABLE (domain text, shard text, per_second integer, per_minute integer, demand bigint, note text)
LANGUAGE sql
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
  SELECT * FROM mailroom_fleet._rebalance(
    CASE WHEN p_domain IS NOT NULL THEN ARRAY[mailroom_fleet._limit_domain(p_domain)] END, false)
$$;
ALTER FUNCTION mailroom_fleet.rebalance_domain_limits(text) OWNER TO mailroom_fleet_owner;
REVOKE ALL ON FUNCTION mailroom_fleet.rebalance_domain_limits(text) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION mailroom_fleet.rebalance_domain_limits(text) TO mailroom_fleet_operator;
COMMENT ON FUNCTION mailroom_fleet.rebalance_domain_limits(text) IS
  'Share every fleet domain limit (or p_domain''s) out among the shards after their demand, now (the pg_cron job mailroom-fleet-rebalance runs it every minute): one row per domain and shard, note saying set, a raise that waits a window, or a shard that did not answer (its share stays and counts against the limit; a WARNING names it).';

CREATE FUNCTION mailroom_fleet.set_domain_limit(p_domain text, p_per_second integer, p_per_minute integer DEFAULT NULL)
RETURNS TABLE (domain text, shard text, per_second integer, per_minute integer, demand bigint, note text)
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
#variable_conflict use_column
DECLARE
  v_domain text := mailroom_fleet._limit_domain(p_domain);
  v_shards integer := (SELECT count(DISTINCT m.connstr) FROM mailroom_fleet.shard_map m);
BEGIN
  IF p_per_second IS NULL AND p_per_minute IS NULL THEN
    RAISE EXCEPTION 'mailroom_fleet: per_second: a fleet limit needs per_second or per_minute (clear_domain_limit removes one)'
      USING ERRCODE = '22023';
  END IF;
  IF p_per_second IS NOT NULL AND p_per_second NOT BETWEEN greatest(v_shards, 1) AND 1000000 THEN
    RAISE EXCEPTION 'mailroom_fleet: per_second: must be between % (1 for each of % shards) and 1000000 or NULL, got %',
      greatest(v_shards, 1), v_shards, p_per_second USING ERRCODE = '22023';
  END IF;
  IF p_per_minute IS NOT NULL AND p_per_minute NOT BETWEEN greatest(v_shards, 1) AND 60000000 THEN
    RAISE EXCEPTION 'mailroom_fleet: per_minute: must be between % (1 for each of % shards) and 60000000 or NULL, got %',
      greatest(v_shards, 1), v_shards, p_per_minute USING ERRCODE = '22023';
  END IF;
  INSERT INTO mailroom_fleet.domain_limits AS l (domain, per_second, per_minute, updated_at)
  VALUES (v_domain, p_per_second, p_per_minute, now())
  ON CONFLICT ON CONSTRAINT domain_limits_pkey DO UPDATE
    SET per_second = EXCLUDED.per_second, per_minute = EXCLUDED.per_minute, updated_at = EXCLUDED.updated_at;
  RETURN QUERY SELECT * FROM mailroom_fleet._rebalance(ARRAY[v_domain], true);
END
$$;
ALTER FUNCTION mailroom_fleet.set_domain_limit(text, integer, integer) OWNER TO mailroom_fleet_owner;
REVOKE ALL ON FUNCTION mailroom_fleet.set_domain_limit(text, integer, integer) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION mailroom_fleet.set_domain_limit(text, integer, integer) TO mailroom_fleet_operator;
COMMENT ON FUNCTION mailroom_fleet.set_domain_limit(text, integer, integer) IS
  'Set a fleet-wide send rate to a recipient domain (any spelling: stored as the shards'' key) and share it out at once; needs every shard to answer (else nothing changes). At least 1 per shard. A raise of a share waits a window after the last lower (the next rebalance).';

CREATE FUNCTION mailroom_fleet.clear_domain_limit(p_domain text)
RETURNS TABLE (shard text, cleared boolean)
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
  v_domain text := mailroom_fleet._limit_domain(p_domain);
BEGIN
  DELETE FROM mailroom_fleet.domain_limits l WHERE l.domain = v_domain;
  RETURN QUERY SELECT d.shard, d.cleared FROM mailroom_fleet._shards_delete_domain_limits(v_domain) AS d ORDER BY 1;
END
$$;
ALTER FUNCTION mailroom_fleet.clear_domain_limit(text) OWNER TO mailroom_fleet_owner;
REVOKE ALL ON FUNCTION mailroom_fleet.clear_domain_limit(text) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION mailroom_fleet.clear_domain_limit(text) TO mailroom_fleet_operator;
COMMENT ON FUNCTION mailroom_fleet.clear_domain_limit(text) IS
  'Remove a fleet domain limit and each shard''s own limit for the domain (mailroom.delete_domain_limits: the shard''s default row applies again). Needs every shard: one that refuses connections fails it with nothing changed.';

CREATE FUNCTION mailroom_fleet.list_domain_limits()
RETURNS TABLE (domain text, per_second integer, per_minute integer, shard text, share_per_second integer,
               share_per_minute integer, demand bigint, answered_at timestamptz, rebalanced_at timestamptz)
LANGUAGE sql STABLE
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
  SELECT l.domain, l.per_second, l.per_minute, s.shard, s.per_second, s.per_minute, s.demand, s.answered_at, l.rebalanced_at
  FROM mailroom_fleet.domain_limits l
  LEFT JOIN mailroom_fleet.domain_shares s ON s.domain = l.domain
  ORDER BY l.domain, s.shard
$$;
ALTER FUNCTION mailroom_fleet.list_domain_limits() OWNER TO mailroom_fleet_owner;
REVOKE ALL ON FUNCTION mailroom_fleet.list_domain_limits() FROM PUBLIC;
GRANT EXECUTE ON FUNCTION mailroom_fleet.list_domain_limits() TO mailroom_fleet_operator;
COMMENT ON FUNCTION mailroom_fleet.list_domain_limits() IS
  'Every fleet domain limit with each shard''s share as last set, its demand then and when it last answered (a shard whose answered_at lags did not answer the latest rebalances).';

-- Not RUN ON ALL: the same per-shard call as the rebalance's, one shard after
-- the other (a shard that does not answer fails it, naming the partition).
CREATE FUNCTION mailroom_fleet.domain_demand()
RETURNS TABLE (shard text, domain text, due bigint, max_per_second integer, max_per_minute integer)
LANGUAGE sql
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
  SELECT d.*
  FROM (SELECT min(m.partition) AS part FROM mailroom_fleet.shard_map m GROUP BY m.connstr) AS p,
       LATERAL mailroom_fleet._shard_domain_demand(p.part, ARRAY(SELECT l.domain FROM mailroom_fleet.domain_limits l)) AS d
  ORDER BY d.domain, d.shard
$$;
ALTER FUNCTION mailroom_fleet.domain_demand() OWNER TO mailroom_fleet_owner;
REVOKE ALL ON FUNCTION mailroom_fleet.domain_demand() FROM PUBLIC;
GRANT EXECUTE ON FUNCTION mailroom_fleet.domain_demand() TO mailroom_fleet_operator;
COMMENT ON FUNCTION mailroom_fleet.domain_demand() IS
  'Every shard''s view of the fleet-limited domains, read now: its due mail to each and the limits it enforces. Fails when a shard does not answer.';

-- Every minute where pg_cron runs in this database (cron.database_name);
-- elsewhere schedule it from the pg_cron database (docs/fleet.md).
DO $$
BEGIN
  IF EXISTS (SELECT FROM pg_catalog.pg_extension WHERE extname = 'pg_cron') THEN
    PERFORM cron.schedule('mailroom-fleet-rebalance', '* * * * *',
                          'SELECT count(*) FROM mailroom_fleet.rebalance_domain_limits()');
  ELSE
    RAISE NOTICE 'mailroom_fleet: pg_cron is not installed in this database: schedule mailroom_fleet.rebalance_domain_limits() every minute yourself';
  END IF;
END
$$;

COMMIT;
