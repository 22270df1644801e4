-- Deploy mailroom:table_suppressions to pg
-- requires: roles

BEGIN;

-- Domains are case-insensitive (RFC 5321 2.4); local parts formally are not,
-- so only the domain is folded.
-- No SET search_path: that would stop the planner from inlining it into the
-- index on messages and into set-based campaign inserts. The body names only
-- pg_catalog functions, schema-qualified.
CREATE FUNCTION mailroom._address_key(p_address text)
RETURNS text
LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE
AS $$
  SELECT pg_catalog.split_part(p_address, '@', 1) || '@' || pg_catalog.lower(pg_catalog.split_part(p_address, '@', 2))
$$;
ALTER FUNCTION mailroom._address_key(text) OWNER TO mailroom_owner;
REVOKE ALL ON FUNCTION mailroom._address_key(text) FROM PUBLIC;
COMMENT ON FUNCTION mailroom._address_key(text) IS
  'Internal: an address with its domain lowered, the form suppressions are compared in.';

CREATE TABLE mailroom.suppressions (
  address_key text PRIMARY KEY,
  address     text NOT NULL,
  reason      text NOT NULL,
  source      text,
  created_at  timestamptz NOT NULL DEFAULT now(),
  CONSTRAINT suppressions_reason_valid
    CHECK (reason IN ('unsubscribed', 'hard_bounce', 'complaint', 'manual')),
  CONSTRAINT suppressions_key_matches_address
    CHECK (address_key = mailroom._address_key(address))
);
ALTER TABLE mailroom.suppressions OWNER TO mailroom_owner;
COMMENT ON TABLE mailroom.suppressions IS
  'Addresses never to mail. enqueue stores mail to them as cancelled (reason suppressed); a 5.1.x bounce adds one.';
COMMENT ON COLUMN mailroom.suppressions.source IS
  'Where the suppression came from: an application name, or "smtp 5.1.1 ..." for a hard bounce.';

COMMIT;
