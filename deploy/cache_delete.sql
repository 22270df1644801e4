-- Deploy mailroom:cache_delete to pg
-- requires: table_cache

BEGIN;

CREATE FUNCTION mailroom.cache_delete(p_key text) RETURNS boolean
LANGUAGE plpgsql
VOLATILE
SECURITY DEFINER
SET search_path = mailroom, pg_temp
AS $$
BEGIN
  IF p_key IS NULL THEN
    RAISE EXCEPTION 'mailroom: key: must not be null' USING ERRCODE = '22023';
  END IF;
  DELETE FROM mailroom.cache WHERE key = p_key;
  RETURN FOUND;
END
$$;

ALTER FUNCTION mailroom.cache_delete(text) OWNER TO mailroom_owner;
REVOKE ALL ON FUNCTION mailroom.cache_delete(text) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION mailroom.cache_delete(text) TO mailroom_app;

COMMENT ON FUNCTION mailroom.cache_delete(text) IS
  'Remove the entry under p_key; true when there was one (expired or not). Call it in the transaction that changes the underlying data and the two cannot disagree.';

COMMIT;
