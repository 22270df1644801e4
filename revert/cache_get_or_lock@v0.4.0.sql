-- Revert mailroom:cache_get_or_lock from pg: the v0.3.0 cache_get_or_lock(key,
-- wait, p_now) back. It calls cache_get(key, p_now): cache_get's rework, later
-- in the plan, is reverted first. _cache_lock_id and cache_unlock did not change.

BEGIN;

DROP FUNCTION mailroom.cache_get_or_lock(text, interval);

CREATE FUNCTION mailroom.cache_get_or_lock(
  p_key  text,
  p_wait interval DEFAULT interval '5 seconds',
  p_now  timestamptz DEFAULT now()
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

  v_value := mailroom.cache_get(p_key, p_now);
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
  v_value := mailroom.cache_get(p_key, p_now);
  IF v_value IS NOT NULL THEN
    PERFORM pg_advisory_unlock(1835100524, v_lock);
    RETURN QUERY SELECT true, v_value, false;
    RETURN;
  END IF;

  -- Still missing: this caller loads. It must cache_set, then cache_unlock.
  RETURN QUERY SELECT false, NULL::jsonb, true;
END
$$;

ALTER FUNCTION mailroom.cache_get_or_lock(text, interval, timestamptz) OWNER TO mailroom_owner;
REVOKE ALL ON FUNCTION mailroom.cache_get_or_lock(text, interval, timestamptz) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION mailroom.cache_get_or_lock(text, interval, timestamptz) TO mailroom_app;

COMMENT ON FUNCTION mailroom.cache_get_or_lock(text, interval, timestamptz) IS
  'Read p_key; on a miss take the key''s load lock (session-level advisory lock), waiting up to p_wait while another session holds it. Returns (hit, value, locked): hit = value found; locked = this session must load, cache_set and cache_unlock; neither = waited p_wait in vain.';

COMMIT;
