-- Deploy mailroom:cache_get to pg (rework for v0.4)
-- requires: cache_get@v0.3.0
-- requires: split_messages
--
-- Issue 13, item 4: no p_now on anything a role can execute. cache_get(key)
-- judges expiry and the LRU touch by the database clock, now() (the old
-- default). No twin: within a transaction now() stands still, so a test sets
-- expires_at and accessed_at around now() and needs no pinned clock; and a hot
-- single-row read pays for one more plpgsql frame: a public function that
-- forwards to an owner-only twin measured 7.5 -> 9.7 us a hit (100,000 calls in
-- one backend, best of 7; see deploy/rate_limit.sql).
-- cache_get_or_lock (reworked before this change) calls cache_get(key), which
-- the old signature answered through its default and this one answers as is.

BEGIN;

DROP FUNCTION mailroom.cache_get(text, timestamptz);

CREATE FUNCTION mailroom.cache_get(p_key text) RETURNS jsonb
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
     AND (c.expires_at IS NULL OR c.expires_at > now());

  -- LRU bookkeeping without turning every hit into a write: touch at most
  -- once a minute per key, and never wait for a row another session holds.
  IF FOUND AND v_accessed < now() - interval '1 minute' THEN
    UPDATE mailroom.cache AS c
       SET accessed_at = now()
     WHERE c.key = (SELECT l.key FROM mailroom.cache AS l
                     WHERE l.key = p_key
                       AND l.accessed_at < now() - interval '1 minute'
                       FOR UPDATE SKIP LOCKED);
  END IF;

  RETURN v_value;
END
$$;

ALTER FUNCTION mailroom.cache_get(text) OWNER TO mailroom_owner;
REVOKE ALL ON FUNCTION mailroom.cache_get(text) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION mailroom.cache_get(text) TO mailroom_app;

COMMENT ON FUNCTION mailroom.cache_get(text) IS
  'The value stored under p_key, or NULL when it is missing or expired (by the database clock, now()); a stored JSON null comes back as ''null''::jsonb. Refreshes the LRU timestamp at most once a minute.';

COMMIT;
