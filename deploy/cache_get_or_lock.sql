-- Deploy mailroom:cache_get_or_lock to pg (rework after v0.4.0)
-- requires: cache_get_or_lock@v0.4.0
--
-- Issue 32, item 4. A cache key's load lock was the session advisory lock
-- (1835100524, hashtext(key)): advisory locks are open to every login with
-- CONNECT, and the key is easy to guess (pg_locks even shows it while a
-- loader holds it), so a stranger holding it made every cache_get_or_lock
-- of that key wait its p_wait and fail. Now the load lock is a row in
-- mailroom.cache_loads, a table without grants: only these functions write it.
--
-- It must still outlive the call (the caller computes the value in its own
-- code between cache_get_or_lock and cache_unlock, in autocommit, holding no
-- transaction), and still go when the loader's session ends. So the row
-- names its holder's backend, and it is taken over when that backend has
-- exited or its lease (one minute) has run out: a loader that crashed costs
-- its waiters a poll, and one whose backend pid was reused by another
-- session costs at most the lease. A waiter polls (10 ms, growing to 50 ms)
-- for the value or a free row, for at most p_wait.
--
-- _cache_lock_id is no longer used; it stays so the change's functions are
-- the same set as before (and a revert finds it).

BEGIN;

CREATE UNLOGGED TABLE mailroom.cache_loads (
  key    text        PRIMARY KEY,
  pid    integer     NOT NULL,
  leased timestamptz NOT NULL
);
ALTER TABLE mailroom.cache_loads OWNER TO mailroom_owner;
REVOKE ALL ON mailroom.cache_loads FROM PUBLIC;
COMMENT ON TABLE mailroom.cache_loads IS
  'Cache keys being loaded: the holder''s backend pid and when its one-minute lease began. UNLOGGED like the cache: after a crash nobody is loading.';

CREATE OR REPLACE FUNCTION mailroom._cache_lock_id(p_key text) RETURNS integer
LANGUAGE sql
IMMUTABLE
PARALLEL SAFE
-- A pure expression: plain SQL without SECURITY DEFINER or SET, so it is inlined.
AS $$ SELECT pg_catalog.hashtext(p_key) $$;

ALTER FUNCTION mailroom._cache_lock_id(text) OWNER TO mailroom_owner;
REVOKE ALL ON FUNCTION mailroom._cache_lock_id(text) FROM PUBLIC;

COMMENT ON FUNCTION mailroom._cache_lock_id(text) IS
  'Internal, unused since the load lock is a row of mailroom.cache_loads: v0.4.0''s advisory lock key of a cache key.';

-- Take p_key's load row for this backend unless a live holder has it.
-- True when this session holds it now.
CREATE FUNCTION mailroom._cache_take_load(p_key text)
RETURNS boolean
LANGUAGE sql
VOLATILE
SECURITY DEFINER
SET search_path = mailroom, pg_temp
AS $$
  INSERT INTO mailroom.cache_loads AS l (key, pid, leased)
  VALUES (p_key, pg_backend_pid(), clock_timestamp())
  ON CONFLICT (key) DO UPDATE SET pid = EXCLUDED.pid, leased = EXCLUDED.leased
  WHERE l.pid = pg_backend_pid()
     OR l.leased < clock_timestamp() - interval '1 minute'
     OR NOT EXISTS (SELECT FROM pg_catalog.pg_stat_activity a WHERE a.pid = l.pid)
  RETURNING true
$$;
ALTER FUNCTION mailroom._cache_take_load(text) OWNER TO mailroom_owner;
REVOKE ALL ON FUNCTION mailroom._cache_take_load(text) FROM PUBLIC;
COMMENT ON FUNCTION mailroom._cache_take_load(text) IS
  'Internal: take a cache key''s load row for this backend when it is free, stale (holder exited) or its lease ran out; true when taken.';

CREATE OR REPLACE FUNCTION mailroom.cache_get_or_lock(
  p_key  text,
  p_wait interval DEFAULT interval '5 seconds'
) RETURNS TABLE (hit boolean, value jsonb, locked boolean)
LANGUAGE plpgsql
VOLATILE
SECURITY DEFINER
SET search_path = mailroom, pg_temp
AS $$
DECLARE
  v_value    jsonb;
  v_got      boolean;
  v_deadline timestamptz;
  v_pause    double precision := 0.01;
  v_old      text := current_setting('lock_timeout');
BEGIN
  IF p_key IS NULL THEN
    RAISE EXCEPTION 'mailroom: key: must not be null' USING ERRCODE = '22023';
  END IF;
  IF p_wait IS NULL OR p_wait < interval '0' THEN
    RAISE EXCEPTION 'mailroom: wait: must be zero or positive (got %)', coalesce(p_wait::text, 'NULL')
      USING ERRCODE = '22023';
  END IF;

  v_deadline := clock_timestamp() + p_wait;
  LOOP
    v_value := mailroom.cache_get(p_key);
    IF v_value IS NOT NULL THEN
      RETURN QUERY SELECT true, v_value, false;
      RETURN;
    END IF;
    -- A loader inside an uncommitted transaction holds its new row: wait for
    -- it no longer than the deadline.
    PERFORM set_config('lock_timeout',
                       greatest(1, ceil(extract(epoch FROM v_deadline - clock_timestamp()) * 1000))::bigint::text
                         || 'ms', true);
    -- pg_stat_activity is read once per transaction unless told otherwise:
    -- without this a waiter would never see its loader's backend exit.
    PERFORM pg_stat_clear_snapshot();
    BEGIN
      v_got := coalesce(mailroom._cache_take_load(p_key), false);
    EXCEPTION WHEN lock_not_available THEN
      v_got := false;
    END;
    PERFORM set_config('lock_timeout', v_old, true);
    IF v_got THEN
      -- The previous holder may have stored the value before it let go.
      v_value := mailroom.cache_get(p_key);
      IF v_value IS NOT NULL THEN
        DELETE FROM mailroom.cache_loads WHERE key = p_key AND pid = pg_backend_pid();
        RETURN QUERY SELECT true, v_value, false;
        RETURN;
      END IF;
      -- Still missing: this caller loads. It must cache_set, then cache_unlock.
      RETURN QUERY SELECT false, NULL::jsonb, true;
      RETURN;
    END IF;
    EXIT WHEN clock_timestamp() >= v_deadline;
    PERFORM pg_sleep(least(v_pause, extract(epoch FROM v_deadline - clock_timestamp())));
    v_pause := least(v_pause * 1.5, 0.05);
  END LOOP;
  -- Waited in vain: neither a value nor the lock. The caller chooses (load anyway, or fail).
  RETURN QUERY SELECT false, NULL::jsonb, false;
END
$$;

ALTER FUNCTION mailroom.cache_get_or_lock(text, interval) OWNER TO mailroom_owner;
REVOKE ALL ON FUNCTION mailroom.cache_get_or_lock(text, interval) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION mailroom.cache_get_or_lock(text, interval) TO mailroom_app;

COMMENT ON FUNCTION mailroom.cache_get_or_lock(text, interval) IS
  'Read p_key; on a miss take the key''s load lock (a row of mailroom.cache_loads naming this backend, until cache_unlock, the end of this session or a one-minute lease), waiting up to p_wait while another session holds it. Returns (hit, value, locked): hit = value found; locked = this session must load, cache_set and cache_unlock; neither = waited p_wait in vain.';

CREATE OR REPLACE FUNCTION mailroom.cache_unlock(p_key text) RETURNS boolean
LANGUAGE plpgsql
VOLATILE
SECURITY DEFINER
SET search_path = mailroom, pg_temp
AS $$
DECLARE
  v_found boolean;
BEGIN
  IF p_key IS NULL THEN
    RAISE EXCEPTION 'mailroom: key: must not be null' USING ERRCODE = '22023';
  END IF;
  DELETE FROM mailroom.cache_loads WHERE key = p_key AND pid = pg_backend_pid();
  GET DIAGNOSTICS v_found = ROW_COUNT;
  RETURN v_found;
END
$$;

ALTER FUNCTION mailroom.cache_unlock(text) OWNER TO mailroom_owner;
REVOKE ALL ON FUNCTION mailroom.cache_unlock(text) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION mailroom.cache_unlock(text) TO mailroom_app;

COMMENT ON FUNCTION mailroom.cache_unlock(text) IS
  'Release the load lock cache_get_or_lock gave this session for p_key (after cache_set, or when loading failed). False when this session did not hold it.';

COMMIT;
