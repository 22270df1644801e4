-- Revert mailroom:cache_sweep from pg: the v0.3.0 cache_sweep(max_entries, p_now) back.

BEGIN;

DROP FUNCTION mailroom.cache_sweep(bigint);

CREATE FUNCTION mailroom.cache_sweep(
  p_max_entries bigint DEFAULT NULL,
  p_now         timestamptz DEFAULT now(),
  OUT expired   bigint,
  OUT evicted   bigint
)
LANGUAGE plpgsql
VOLATILE
SECURITY DEFINER
SET search_path = mailroom, pg_temp
AS $$
DECLARE
  v_cap bigint;
BEGIN
  -- The setting row is added by the change cache_settings (mailroom.settings
  -- comes from table_settings); PL/pgSQL looks it up at run time.
  v_cap := coalesce(p_max_entries, mailroom._setting('cache_max_entries')::bigint, 100000);
  IF v_cap < 0 THEN
    RAISE EXCEPTION 'mailroom: max_entries: must not be negative (got %)', v_cap
      USING ERRCODE = '22023';
  END IF;

  -- Housekeeping only: cache_get already treats these rows as misses.
  DELETE FROM mailroom.cache WHERE expires_at <= p_now;
  GET DIAGNOSTICS expired = ROW_COUNT;

  -- The entry cap: keep the v_cap most recently used entries, evict the rest.
  -- The probe reads at most v_cap + 1 rows, so an under-cap cache costs no sort.
  evicted := 0;
  IF EXISTS (SELECT FROM mailroom.cache OFFSET v_cap) THEN
    DELETE FROM mailroom.cache AS c
     USING (SELECT l.key FROM mailroom.cache AS l
             ORDER BY l.accessed_at DESC, l.key DESC
            OFFSET v_cap) AS old
     WHERE c.key = old.key;
    GET DIAGNOSTICS evicted = ROW_COUNT;
  END IF;
END
$$;

ALTER FUNCTION mailroom.cache_sweep(bigint, timestamptz) OWNER TO mailroom_owner;
REVOKE ALL ON FUNCTION mailroom.cache_sweep(bigint, timestamptz) FROM PUBLIC;
-- Operator only: harden_privileges, deployed before this change, had taken the
-- runner's grant away (its own revert gives it back).
GRANT EXECUTE ON FUNCTION mailroom.cache_sweep(bigint, timestamptz) TO mailroom_operator;

COMMENT ON FUNCTION mailroom.cache_sweep(bigint, timestamptz) IS
  'Housekeeping (pg_cron job mailroom-cache-sweep, every minute): delete entries expired at p_now, then evict the least recently used entries beyond the cap. Cap: p_max_entries, else the setting cache_max_entries (mailroom.set_setting), else 100000.';

COMMIT;
