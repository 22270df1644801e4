-- Revert mailroom:address_key_qualified from pg (the body of table_suppressions)

BEGIN;

CREATE OR REPLACE FUNCTION mailroom._address_key(p_address text)
RETURNS text
LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE
AS $$
  SELECT pg_catalog.split_part(p_address, '@', 1) || '@' || pg_catalog.lower(pg_catalog.split_part(p_address, '@', 2))
$$;

COMMIT;
