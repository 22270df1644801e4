-- Deploy mailroom:table_rate_limits to pg
-- requires: roles

BEGIN;

-- UNLOGGED like the cache: counters are cheap to write, emptied by crash
-- recovery (every limit starts fresh: see docs/cache-and-rate-limits.md).
CREATE UNLOGGED TABLE mailroom.rate_limits (
  key           text COLLATE "C" NOT NULL,
  algorithm     text NOT NULL,
  window_length interval NOT NULL,
  window_start  timestamptz,
  hits          integer NOT NULL DEFAULT 0,
  slots         bigint[],
  slot_hits     integer[],
  expires_at    timestamptz NOT NULL,
  CONSTRAINT rate_limits_pkey PRIMARY KEY (key),
  CONSTRAINT rate_limits_algorithm CHECK (algorithm IN ('fixed', 'sliding')),
  CONSTRAINT rate_limits_key_length CHECK (octet_length(key) BETWEEN 1 AND 1000),
  CONSTRAINT rate_limits_window_positive CHECK (window_length > interval '0')
-- Every call updates its row and no indexed column changes within a window:
-- free space on the page lets those be HOT updates.
) WITH (fillfactor = 50);

ALTER TABLE mailroom.rate_limits OWNER TO mailroom_owner;

COMMENT ON TABLE mailroom.rate_limits IS
  'Rate-limit state, one row per key (rate_limit, rate_limit_sliding, and the send rates of claim_batch under keys starting ''mailroom/''). UNLOGGED: emptied by crash recovery. Private: use the functions.';
COMMENT ON COLUMN mailroom.rate_limits.key IS
  'The caller''s key, e.g. ''login:203.0.113.7''. Keys starting with ''mailroom/'' are reserved for mailroom''s own send rates.';
COMMENT ON COLUMN mailroom.rate_limits.algorithm IS
  '''fixed'' (rate_limit) or ''sliding'' (rate_limit_sliding); a key used with the other algorithm or another window starts over.';
COMMENT ON COLUMN mailroom.rate_limits.window_length IS 'The window the key was last used with.';
COMMENT ON COLUMN mailroom.rate_limits.window_start IS 'fixed: start of the current window (aligned to the Unix epoch).';
COMMENT ON COLUMN mailroom.rate_limits.hits IS
  'fixed: hits counted in the current window (stops at limit + 1); sliding: hits granted within the last window at the last grant.';
COMMENT ON COLUMN mailroom.rate_limits.slots IS
  'sliding: numbers of the time slots (window / 50 long, counted from the Unix epoch) that hold grants, ascending.';
COMMENT ON COLUMN mailroom.rate_limits.slot_hits IS 'sliding: hits granted in each slot of slots.';
COMMENT ON COLUMN mailroom.rate_limits.expires_at IS
  'From this instant the row carries no state any more; rate_limit_sweep deletes it one window later.';

-- Time as whole microseconds since the Unix epoch, exactly (no float rounding).
-- The two helpers are pure expressions over pg_catalog functions (always
-- searched first) and touch no table: deliberately plain SQL functions without
-- SECURITY DEFINER or SET, so the planner inlines them into their callers
-- (either clause would cost a function call with a GUC save/restore each time).
-- Both go through timestamp without time zone at UTC, so every function in
-- them is immutable: a body with a stable part (timestamptz + interval,
-- extract from timestamptz) would not be inlined and cost ~20 us per call.
CREATE FUNCTION mailroom._epoch_us(p_at timestamptz) RETURNS bigint
LANGUAGE sql
IMMUTABLE
PARALLEL SAFE
AS $$ SELECT (extract(epoch FROM (p_at AT TIME ZONE 'UTC')) * 1000000)::bigint $$;

ALTER FUNCTION mailroom._epoch_us(timestamptz) OWNER TO mailroom_owner;
REVOKE ALL ON FUNCTION mailroom._epoch_us(timestamptz) FROM PUBLIC;
COMMENT ON FUNCTION mailroom._epoch_us(timestamptz) IS
  'Internal: microseconds since the Unix epoch, exact (inverse of _from_epoch_us).';

CREATE FUNCTION mailroom._from_epoch_us(p_us bigint) RETURNS timestamptz
LANGUAGE sql
IMMUTABLE
PARALLEL SAFE
AS $$
  SELECT (timestamp '1970-01-01 00:00:00' + p_us * interval '1 microsecond') AT TIME ZONE 'UTC'
$$;

ALTER FUNCTION mailroom._from_epoch_us(bigint) OWNER TO mailroom_owner;
REVOKE ALL ON FUNCTION mailroom._from_epoch_us(bigint) FROM PUBLIC;
COMMENT ON FUNCTION mailroom._from_epoch_us(bigint) IS
  'Internal: the instant p_us microseconds after the Unix epoch, exact (inverse of _epoch_us).';

COMMIT;
