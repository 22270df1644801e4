-- Deploy mailroom:cache_delete_prefix to pg
-- requires: table_cache

BEGIN;

CREATE FUNCTION mailroom.cache_delete_prefix(p_prefix text) RETURNS bigint
LANGUAGE plpgsql
VOLATILE
SECURITY DEFINER
SET search_path = mailroom, pg_temp
-- The index range is derived from the prefix's value: plan each call for it.
SET plan_cache_mode = force_custom_plan
AS $$
DECLARE
  v_count bigint;
BEGIN
  IF p_prefix IS NULL OR p_prefix = '' THEN
    RAISE EXCEPTION 'mailroom: prefix: must not be empty' USING ERRCODE = '22023',
      HINT = 'Namespace keys ("courses:list:") and delete by that prefix.';
  END IF;

  -- starts_with(), not LIKE: '_', '%' and '\' in a prefix match only
  -- themselves, with nothing to escape. On the "C"-collated key PostgreSQL 15
  -- turns it into a range scan of the primary key.
  DELETE FROM mailroom.cache WHERE starts_with(key, p_prefix);
  GET DIAGNOSTICS v_count = ROW_COUNT;
  RETURN v_count;
END
$$;

ALTER FUNCTION mailroom.cache_delete_prefix(text) OWNER TO mailroom_owner;
REVOKE ALL ON FUNCTION mailroom.cache_delete_prefix(text) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION mailroom.cache_delete_prefix(text) TO mailroom_app;

COMMENT ON FUNCTION mailroom.cache_delete_prefix(text) IS
  'Remove every entry whose key starts with p_prefix, compared byte for byte (no wildcards: _, % and \ match only themselves). Returns how many were removed.';

COMMIT;
