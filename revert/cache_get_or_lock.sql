-- Revert mailroom:cache_get_or_lock from pg: back to v0.4.0's load lock, the
-- session advisory lock (1835100524, hashtext(key)). A load in progress
-- loses its row: at worst one more caller loads the same key.

BEGIN;

-- Stampede protection across processes and hosts. The load lock is a
-- SESSION-level advisory lock, deliberately: the caller computes the value in
-- application code between two calls (cache_get_or_lock, then cache_set and
-- cache_unlock), and must not hold a transaction open while it does (an open
-- transaction pins vacuum and a pooled connection, and a transaction-level lock
-- would be gone the moment an autocommit call returned). A session lock
-- survives between the calls, and a loader whose process dies releases it
-- with its connection. The price: the caller must call cache_unlock (the
-- Python helper does, in `finally`), and a transaction-mode pooler such as
-- PgBouncer's must not sit between caller and database.
--
-- Lock key: (1835100524 = 'mail' in ASCII, hashtext(key)). Two keys with the
-- same hash share a lock: harmless, they just load one after the other.

CREATE OR REPLACE FUNCTION mailroom._cache_lock_id(p_key text) RETURNS integer
LANGUAGE sql
IMMUTABLE
PARALLEL SAFE
-- A pure expression: plain SQL without SECURITY DEFINER or SET, so it is inlined.
AS $$ SELECT pg_catalog.hashtext(p_key) $$;

ALTER FUNCTION mailroom._cache_lock_id(text) OWNER TO mailroom_owner;
REVOKE ALL ON FUNCTION mailroom._cache_lock_id(text) FROM PUBLIC;

COMMENT ON FUNCTION mailroom._cache_lock_id(text) IS
  'Internal: second key of the advisory load lock of a cache key (the first is 1835100524).';

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
  v_value jsonb;
  v_lock  integer;
  v_got   boolean;
  v_old   text;
BEGIN
  IF p_key IS NULL THEN
    RAISE EXCEPTION 'mailroom: key: must not be null' USING ERRCODE = '22023';
  END IF;
  IF p_wait IS NULL OR p_wait < interval '0' THEN
    RAISE EXCEPTION 'mailroom: wait: must be zero or positive (got %)', coalesce(p_wait::text, 'NULL')
      USING ERRCODE = '22023';
  END IF;

  v_value := mailroom.cache_get(p_key);
  IF v_value IS NOT NULL THEN
    RETURN QUERY SELECT true, v_value, false;
    RETURN;
  END IF;

  v_lock := mailroom._cache_lock_id(p_key);
  v_got := pg_try_advisory_lock(1835100524, v_lock);
  IF NOT v_got AND p_wait > interval '0' THEN
    -- Someone is loading: wait for them (at most p_wait), then read what they stored.
    v_old := current_setting('lock_timeout');
    PERFORM set_config('lock_timeout',
                       ceil(extract(epoch FROM p_wait) * 1000)::bigint::text || 'ms', true);
    BEGIN
      PERFORM pg_advisory_lock(1835100524, v_lock);
      v_got := true;
    EXCEPTION WHEN lock_not_available THEN
      v_got := false;
    END;
    PERFORM set_config('lock_timeout', v_old, true);
  END IF;

  IF NOT v_got THEN
    -- Timed out: neither a value nor the lock. The caller chooses (load anyway, or fail).
    RETURN QUERY SELECT false, NULL::jsonb, false;
    RETURN;
  END IF;

  -- We hold the lock. The previous holder may have stored the value meanwhile.
  v_value := mailroom.cache_get(p_key);
  IF v_value IS NOT NULL THEN
    PERFORM pg_advisory_unlock(1835100524, v_lock);
    RETURN QUERY SELECT true, v_value, false;
    RETURN;
  END IF;

  -- Still missing: this caller loads. It must cache_set, then cache_unlock.
  RETURN QUERY SELECT false, NULL::jsonb, true;
END
$$;

ALTER FUNCTION mailroom.cache_get_or_lock(text, interval) OWNER TO mailroom_owner;
REVOKE ALL ON FUNCTION mailroom.cache_get_or_lock(text, interval) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION mailroom.cache_get_or_lock(text, interval) TO mailroom_app;

COMMENT ON FUNCTION mailroom.cache_get_or_lock(text, interval) IS
  'Read p_key; on a miss take the key''s load lock (session-level advisory lock), waiting up to p_wait while another session holds it. Returns (hit, value, locked): hit = value found; locked = this session must load, cache_set and cache_unlock; neither = waited p_wait in vain.';

CREATE OR REPLACE FUNCTION mailroom.cache_unlock(p_key text) RETURNS boolean
LANGUAGE plpgsql
VOLATILE
SECURITY DEFINER
SET search_path = mailroom, pg_temp
AS $$
DECLARE
  v_lock integer;
BEGIN
  IF p_key IS NULL THEN
    RAISE EXCEPTION 'mailroom: key: must not be null' USING ERRCODE = '22023';
  END IF;
  v_lock := mailroom._cache_lock_id(p_key);
  -- pg_advisory_unlock warns when the lock is not held: look first.
  IF NOT EXISTS (SELECT FROM pg_catalog.pg_locks AS l
                  WHERE l.locktype = 'advisory'
                    AND l.pid = pg_backend_pid()
                    AND l.classid = 1835100524::oid
                    AND l.objid = v_lock::oid
                    AND l.objsubid = 2
                    AND l.granted) THEN
    RETURN false;
  END IF;
  RETURN pg_advisory_unlock(1835100524, v_lock);
END
$$;

ALTER FUNCTION mailroom.cache_unlock(text) OWNER TO mailroom_owner;
REVOKE ALL ON FUNCTION mailroom.cache_unlock(text) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION mailroom.cache_unlock(text) TO mailroom_app;

COMMENT ON FUNCTION mailroom.cache_unlock(text) IS
  'Release the load lock cache_get_or_lock gave this session for p_key (after cache_set, or when loading failed). False when this session did not hold it.';

DROP FUNCTION mailroom._cache_take_load(text);
DROP TABLE mailroom.cache_loads;

COMMIT;
