-- Deploy mailroom:address_key_qualified to pg
-- requires: table_suppressions

-- _address_key stays a plain SQL function without SET search_path (so the
-- planner inlines it, and the index messages_to_address_idx and the check
-- suppressions_key_matches_address use it). Such a body is parsed with the
-- search_path of whoever evaluates it: a REINDEX, VACUUM or ANALYZE run by a
-- DBA whose path puts a writable schema first ran a planted ||(text, text)
-- as mailroom_owner (tests/pgtap/address_key_qualified.sql). Every name in the
-- body is now schema-qualified, the operator too. Same result for every input,
-- so the index and the check stay valid.

BEGIN;

CREATE OR REPLACE FUNCTION mailroom._address_key(p_address text)
RETURNS text
LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE
AS $$
  SELECT pg_catalog.split_part(p_address, '@', 1)
         OPERATOR(pg_catalog.||) '@'
         OPERATOR(pg_catalog.||) pg_catalog.lower(pg_catalog.split_part(p_address, '@', 2))
$$;

COMMIT;
