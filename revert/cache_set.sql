-- Revert mailroom:cache_set from pg: the v0.3.0 cache_set(key, value, ttl, p_now) back.

BEGIN;

DROP FUNCTION mailroom.cache_set(text, jsonb, interval);

CREATE FUNCTION mailroom.cache_set(
  p_key   text,
  p_value jsonb,
  p_ttl   interval DEFAULT NULL,
  p_now   timestamptz DEFAULT now()
) RETURNS void
LANGUAGE plpgsql
VOLATILE
SECURITY DEFINER
SET search_path = mailroom, pg_temp
AS $$
BEGIN
  IF p_key IS NULL OR p_key = '' THEN
    RAISE EXCEPTION 'mailroom: key: must not be empty' USING ERRCODE = '22023';
  END IF;
  IF octet_length(p_key) > 1000 THEN
    RAISE EXCEPTION 'mailroom: key: longer than 1000 bytes (% bytes)', octet_length(p_key)
      USING ERRCODE = '22023', HINT = 'Hash long parts of the key, e.g. md5(query).';
  END IF;
  IF p_value IS NULL THEN
    RAISE EXCEPTION 'mailroom: value: must not be null' USING ERRCODE = '22023',
      HINT = 'Store ''null''::jsonb to cache a JSON null, or call cache_delete.';
  END IF;
  IF p_ttl IS NOT NULL AND p_ttl <= interval '0' THEN
    RAISE EXCEPTION 'mailroom: ttl: must be positive or NULL for no expiry (got %)', p_ttl
      USING ERRCODE = '22023';
  END IF;
  -- NULL already means "never expires"; past a century a ttl is a mistake,
  -- and p_now + p_ttl leaves the timestamp range (22008) some 290,000 years on.
  IF p_ttl > interval '100 years' THEN
    RAISE EXCEPTION 'mailroom: ttl: must be at most 100 years, or NULL for no expiry (got %)', p_ttl
      USING ERRCODE = '22023';
  END IF;

  INSERT INTO mailroom.cache AS c (key, value, expires_at, created_at, accessed_at)
  VALUES (p_key, p_value, p_now + p_ttl, p_now, p_now)
  ON CONFLICT (key) DO UPDATE
     SET value       = EXCLUDED.value,
         expires_at  = EXCLUDED.expires_at,
         created_at  = EXCLUDED.created_at,
         accessed_at = EXCLUDED.accessed_at;
END
$$;

ALTER FUNCTION mailroom.cache_set(text, jsonb, interval, timestamptz) OWNER TO mailroom_owner;
REVOKE ALL ON FUNCTION mailroom.cache_set(text, jsonb, interval, timestamptz) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION mailroom.cache_set(text, jsonb, interval, timestamptz) TO mailroom_app;

COMMENT ON FUNCTION mailroom.cache_set(text, jsonb, interval, timestamptz) IS
  'Store p_value under p_key (insert or replace). p_ttl NULL = no expiry; otherwise at most 100 years, and the entry is a miss from p_now + p_ttl on.';

COMMIT;
