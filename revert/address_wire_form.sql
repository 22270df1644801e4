-- Revert mailroom:address_wire_form from pg: back to the key that lower-cases
-- the domain as given. Mail stored in wire form keeps it (the spelling the
-- application gave is not kept); suppressions are keyed the old way again.

BEGIN;

DROP TRIGGER contents_wire_address ON mailroom.contents;
DROP FUNCTION mailroom._contents_wire_address();
DROP FUNCTION mailroom._wire_address(text);

CREATE OR REPLACE FUNCTION mailroom._address_key(p_address text)
RETURNS text
LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE
AS $$
  SELECT pg_catalog.split_part(p_address, '@', 1)
         OPERATOR(pg_catalog.||) '@'
         OPERATOR(pg_catalog.||) pg_catalog.lower(pg_catalog.split_part(p_address, '@', 2))
$$;

DROP FUNCTION mailroom._idna_domain(text);
DROP FUNCTION mailroom._punycode(text);

-- The stored keys follow the old function again (the generated column of
-- contents recomputes on update; the suppressions' check wants it).
UPDATE mailroom.contents SET to_address = to_address
WHERE octet_length(to_address) <> length(to_address) AND address_key <> mailroom._address_key(to_address);
UPDATE mailroom.suppressions SET address_key = mailroom._address_key(address)
WHERE address_key <> mailroom._address_key(address);

COMMIT;
