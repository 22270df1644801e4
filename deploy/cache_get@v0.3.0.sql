-- Deploy mailroom:cache_get to pg
-- requires: table_cache

BEGIN;

CREATE FUNCTION mailroom.cache_get(
  p_key text,
  p_now timestamptz DEFAULT now()
) RETURNS jsonb
LANGUAGE plpgsql
VOLATILE
SECURITY DEFINER
SET search_path = mailroom, pg_temp
AS $$
DECLARE
  v_value    jsonb;
  v_accessed timestamptz;
BEGIN
  IF p_key IS NULL THEN
    RAISE EXCEPTION 'mailroom: key: must not be null' USING ERRCODE = '22023';
  END IF;

  -- Expiry is checked here, on read: correctness never depends on a sweep.
  SELECT c.value, c.accessed_at
    INTO v_value, v_accessed
    FROM mailroom.cache AS c
   WHERE c.key = p_key
     AND (c.expires_at IS NULL OR c.expires_at > p_now);

  -- LRU bookkeeping without turning every hit into a write: touch at most
  -- once a minute per key, and never wait for a row another session holds.
  IF FOUND AND v_accessed < p_now - interval '1 minute' THEN
    UPDATE mailroom.cache AS c
       SET accessed_at = p_now
     WHERE c.key = (SELECT l.key FROM mailroom.cache AS l
                     WHERE l.key = p_key
                       AND l.accessed_at < p_now - interval '1 minute'
                       FOR UPDATE SKIP LOCKED);
  END IF;

  RETURN v_value;
END
$$;

ALTER FUNCTION mailroom.cache_get(text, timestamptz) OWNER TO mailroom_owner;
REVOKE ALL ON FUNCTION mailroom.cache_get(text, timestamptz) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION mailroom.cache_get(text, timestamptz) TO mailroom_app;

COMMENT ON FUNCTION mailroom.cache_get(text, timestamptz) IS
  'The value stored under p_key, or NULL when it is missing or expired at p_now (a stored JSON null comes back as ''null''::jsonb). Refreshes the LRU timestamp at most once a minute.';

COMMIT;
