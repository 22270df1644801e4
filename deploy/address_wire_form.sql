-- Deploy mailroom:address_wire_form to pg
-- requires: address_key_qualified
-- requires: table_contents
-- requires: streams
-- requires: enqueue_campaign

-- One spelling of an address everywhere a rule looks at it. The runner puts
-- a domain on the wire as IDNA 2008 with the UTS 46 mapping does (the Python
-- idna package): "ｅｘａｍｐｌｅ.com" (fullwidth letters) leaves as
-- "example.com", "ÜNICODE.de" as "xn--nicode-2ya.de". Until this change the
-- gate, the suppression list and the domain limits compared the spelling the
-- application gave, lower-cased: a suppression of ann@example.com did not
-- stop ann@ｅｘａｍｐｌｅ.com, which the runner then delivered to
-- ann@example.com.
--
-- Now the mapping is computed here, in one place, and every rule sees its
-- result:
--   _idna_domain(domain)  the wire form of a domain: the UTS 46 mapping
--                         (NFKC, lower case, NFKC again; the ideographic
--                         full stops U+3002, U+FF0E and U+FF61 are dots),
--                         then every label outside ASCII as its A-label
--                         (xn--, RFC 3492 Punycode);
--   _address_key(address) the suppression key: the local part as given,
--                         "@", the wire form of the domain;
--   contents.to_address   written in wire form on insert (a trigger, which
--                         runs only for an address outside ASCII: plain ASCII
--                         mail pays the trigger's WHEN test and nothing
--                         else), so its to_domain (the domain limits' key),
--                         its address_key (the gate's) and what claim_batch
--                         hands the runner are the wire form too.
-- Local parts stay exactly as given (RFC 5321: only the receiving host may
-- interpret them; an SMTPUTF8 local part goes out as it is).
--
-- What is not checked here: UTS 46's disallowed code points and the
-- bidi and contextual rules. A domain that maps to something no host can be
-- called (an underscore, say) is kept as it maps, and the runner's idna step
-- still refuses that one mail permanently, as before. The mapping is total
-- so that no insert (a campaign chunk of thousands) ever fails on one
-- address.
--
-- Existing data is re-keyed once: mail whose domain is outside ASCII gets
-- its wire form (a scan of contents for such rows), and suppressions whose
-- key changes get the new key; where two spellings of one mailbox were both
-- suppressed for the same stream, one row stays (the one already under the
-- new key, else the oldest).

BEGIN;

-- RFC 3492 Punycode of one label (no xn-- prefix), for code points >= 128.
CREATE FUNCTION mailroom._punycode(p_label text)
RETURNS text
LANGUAGE plpgsql IMMUTABLE STRICT PARALLEL SAFE
SECURITY DEFINER
SET search_path = mailroom, pg_temp
AS $$
DECLARE
  base  CONSTANT integer := 36;
  tmin  CONSTANT integer := 1;
  tmax  CONSTANT integer := 26;
  cps   integer[] := ARRAY(SELECT ascii(ch) FROM regexp_split_to_table(p_label, '') AS ch);
  total integer := cardinality(cps);
  output text := (SELECT coalesce(string_agg(chr(c), '' ORDER BY o), '')
                  FROM unnest(cps) WITH ORDINALITY AS u(c, o) WHERE c < 128);
  b     integer := length(output);
  h     integer := b;
  n     integer := 128;
  bias  integer := 72;
  delta bigint := 0;
  m     integer;
  q     bigint;
  k     integer;
  t     integer;
  d     bigint;
BEGIN
  IF b > 0 THEN
    output := output || '-';
  END IF;
  WHILE h < total LOOP
    SELECT min(c) INTO m FROM unnest(cps) AS c WHERE c >= n;
    delta := delta + (m - n)::bigint * (h + 1);
    n := m;
    FOR i IN 1 .. total LOOP
      IF cps[i] < n THEN
        delta := delta + 1;
      ELSIF cps[i] = n THEN
        q := delta;
        k := base;
        LOOP
          t := CASE WHEN k <= bias THEN tmin WHEN k >= bias + tmax THEN tmax ELSE k - bias END;
          EXIT WHEN q < t;
          d := t + (q - t) % (base - t);
          output := output || chr(CASE WHEN d < 26 THEN 97 + d ELSE 22 + d END::integer);
          q := (q - t) / (base - t);
          k := k + base;
        END LOOP;
        output := output || chr(CASE WHEN q < 26 THEN 97 + q ELSE 22 + q END::integer);
        -- adapt (RFC 3492 6.1)
        d := CASE WHEN h = b THEN delta / 700 ELSE delta / 2 END;
        d := d + d / (h + 1);
        k := 0;
        WHILE d > ((base - tmin) * tmax) / 2 LOOP
          d := d / (base - tmin);
          k := k + base;
        END LOOP;
        bias := k + ((base - tmin + 1) * d) / (d + 38);
        delta := 0;
        h := h + 1;
      END IF;
    END LOOP;
    delta := delta + 1;
    n := n + 1;
  END LOOP;
  RETURN output;
END
$$;
ALTER FUNCTION mailroom._punycode(text) OWNER TO mailroom_owner;
REVOKE ALL ON FUNCTION mailroom._punycode(text) FROM PUBLIC;
COMMENT ON FUNCTION mailroom._punycode(text) IS
  'Internal: the RFC 3492 Punycode of one domain label (without the xn-- prefix).';

CREATE FUNCTION mailroom._idna_domain(p_domain text)
RETURNS text
LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE
SECURITY DEFINER
SET search_path = mailroom, pg_temp
AS $$
  SELECT string_agg(CASE WHEN label ~ '^[\x01-\x7f]*$' THEN label ELSE 'xn--' || mailroom._punycode(label) END,
                    '.' ORDER BY o)
  FROM regexp_split_to_table(
         translate(normalize(lower(normalize(p_domain, NFKC)), NFKC), U&'\3002\FF0E\FF61', '...'), '\.')
       WITH ORDINALITY AS l(label, o)
$$;
ALTER FUNCTION mailroom._idna_domain(text) OWNER TO mailroom_owner;
REVOKE ALL ON FUNCTION mailroom._idna_domain(text) FROM PUBLIC;
COMMENT ON FUNCTION mailroom._idna_domain(text) IS
  'Internal: a domain''s wire form: the UTS 46 mapping (NFKC, lower case, ideographic full stops as dots), every label outside ASCII as its xn-- A-label. Total: never raises.';

-- Still a plain SQL function (inlined; see address_key_qualified). An ASCII
-- domain, nearly every one, takes the old path: lower().
CREATE OR REPLACE FUNCTION mailroom._address_key(p_address text)
RETURNS text
LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE
AS $$
  SELECT pg_catalog.split_part(p_address, '@', 1)
         OPERATOR(pg_catalog.||) '@'
         OPERATOR(pg_catalog.||)
         CASE WHEN pg_catalog.octet_length(pg_catalog.split_part(p_address, '@', 2))
                   OPERATOR(pg_catalog.=) pg_catalog.length(pg_catalog.split_part(p_address, '@', 2))
              THEN pg_catalog.lower(pg_catalog.split_part(p_address, '@', 2))
              ELSE mailroom._idna_domain(pg_catalog.split_part(p_address, '@', 2)) END
$$;

-- The address as the runner will put it in RCPT TO: the local part as
-- given, a domain outside ASCII in wire form (an ASCII one keeps its case:
-- the To header shows what the application wrote).
CREATE FUNCTION mailroom._wire_address(p_address text)
RETURNS text
LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE
AS $$
  SELECT CASE WHEN pg_catalog.octet_length(pg_catalog.split_part(p_address, '@', 2))
                   OPERATOR(pg_catalog.=) pg_catalog.length(pg_catalog.split_part(p_address, '@', 2))
                THEN p_address
              ELSE pg_catalog.split_part(p_address, '@', 1) OPERATOR(pg_catalog.||) '@'
                   OPERATOR(pg_catalog.||) mailroom._idna_domain(pg_catalog.split_part(p_address, '@', 2)) END
$$;
ALTER FUNCTION mailroom._wire_address(text) OWNER TO mailroom_owner;
REVOKE ALL ON FUNCTION mailroom._wire_address(text) FROM PUBLIC;
COMMENT ON FUNCTION mailroom._wire_address(text) IS
  'Internal: the address as it goes on the wire: local part as given, a domain outside ASCII mapped (UTS 46) and written as A-labels.';

CREATE FUNCTION mailroom._contents_wire_address()
RETURNS trigger
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = mailroom, pg_temp
AS $$
BEGIN
  -- An address the campaign chunk will refuse as invalid_address stays as
  -- given: mapped, a zero-width space or a bad label could come out valid.
  IF coalesce(mailroom._address_ok(NEW.to_address), false) THEN
    NEW.to_address := mailroom._wire_address(NEW.to_address);
  END IF;
  RETURN NEW;
END
$$;
ALTER FUNCTION mailroom._contents_wire_address() OWNER TO mailroom_owner;
REVOKE ALL ON FUNCTION mailroom._contents_wire_address() FROM PUBLIC;
COMMENT ON FUNCTION mailroom._contents_wire_address() IS
  'Trigger (contents, before insert of an address outside ASCII): store the recipient in wire form, so to_domain, address_key and the claim see it.';

-- Stored generated columns (to_domain, address_key) are computed after
-- BEFORE triggers, from the address the trigger wrote.
CREATE TRIGGER contents_wire_address
  BEFORE INSERT ON mailroom.contents
  FOR EACH ROW WHEN (octet_length(NEW.to_address) <> length(NEW.to_address))
  EXECUTE FUNCTION mailroom._contents_wire_address();
COMMENT ON TRIGGER contents_wire_address ON mailroom.contents IS
  'A recipient outside ASCII is stored in wire form (mailroom._wire_address); ASCII mail never calls the function.';

-- Re-key what is there. contents is insert-only for the roles; its owner
-- rewrites the address once (the generated columns follow).
UPDATE mailroom.contents
SET to_address = mailroom._wire_address(to_address)
WHERE octet_length(to_address) <> length(to_address)
  AND to_address <> mailroom._wire_address(to_address)
  AND mailroom._address_ok(to_address);

DO $$
DECLARE
  r record;
BEGIN
  FOR r IN SELECT s.ctid AS row_id, s.address, s.stream, mailroom._address_key(s.address) AS new_key
           FROM mailroom.suppressions s
           WHERE s.address_key <> mailroom._address_key(s.address)
           ORDER BY s.created_at, s.address
  LOOP
    IF EXISTS (SELECT FROM mailroom.suppressions o
               WHERE o.address_key = r.new_key AND o.stream IS NOT DISTINCT FROM r.stream) THEN
      DELETE FROM mailroom.suppressions WHERE ctid = r.row_id;   -- the other spelling's row holds
    ELSE
      UPDATE mailroom.suppressions SET address_key = r.new_key WHERE ctid = r.row_id;
    END IF;
  END LOOP;
END
$$;

COMMIT;
