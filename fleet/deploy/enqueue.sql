-- Deploy mailroom_fleet:enqueue to pg
-- requires: schema

-- Routing. mailroom_fleet.enqueue runs on one shard, chosen by
--   RUN ON mailroom_fleet.shard_key(p_to)
-- shard_key is hashtext(address key), and PL/Proxy takes partition
--   hash & (partition count - 1)
-- (its default bit-mask mapping, which is why the count must be a power of
-- two). The address key is the one the shards' suppression list and gate
-- use, mailroom._address_key: the local part exactly as given, "@", the
-- domain lower-cased, or for a domain outside ASCII its wire form (the UTS 46
-- mapping, then xn-- A-labels). So every spelling of one mailbox that the
-- shards treat as one (ann@Example.COM, ann@example.com, ann@ｅｘａｍｐｌｅ.com)
-- lands on one shard, and its mail, its limits and its suppressions meet
-- there. The local part is not folded: Ann@ and ann@ are two mailboxes to
-- mailroom, and may be on two shards.
--
-- The key is computed here, on the directory: asking a shard would put a
-- second shard in the path of every enqueue (and PL/Proxy refuses a nested
-- call to the same cluster from a RUN ON function). The directory has no
-- mailroom schema, so the address key's three functions are repeated here
-- from the main plan's deploy/address_wire_form.sql, unchanged but for the
-- schema; tests/test_fleet.py checks that both give the same key on every
-- spelling it tries, so a change to one that is not made to the other fails
-- the tests.

BEGIN;

-- RFC 3492 Punycode of one label (no xn-- prefix), for code points >= 128.
CREATE FUNCTION mailroom_fleet._punycode(p_label text)
RETURNS text
LANGUAGE plpgsql IMMUTABLE STRICT PARALLEL SAFE
SECURITY DEFINER
SET search_path = mailroom_fleet, pg_temp
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
ALTER FUNCTION mailroom_fleet._punycode(text) OWNER TO mailroom_fleet_owner;
REVOKE ALL ON FUNCTION mailroom_fleet._punycode(text) FROM PUBLIC;
COMMENT ON FUNCTION mailroom_fleet._punycode(text) IS
  'Internal: the RFC 3492 Punycode of one domain label (without the xn-- prefix).';

CREATE FUNCTION mailroom_fleet._idna_domain(p_domain text)
RETURNS text
LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE
SECURITY DEFINER
SET search_path = mailroom_fleet, pg_temp
AS $$
  SELECT string_agg(CASE WHEN label ~ '^[\x01-\x7f]*$' THEN label ELSE 'xn--' || mailroom_fleet._punycode(label) END,
                    '.' ORDER BY o)
  FROM regexp_split_to_table(
         translate(normalize(lower(normalize(p_domain, NFKC)), NFKC), U&'\3002\FF0E\FF61', '...'), '\.')
       WITH ORDINALITY AS l(label, o)
$$;
ALTER FUNCTION mailroom_fleet._idna_domain(text) OWNER TO mailroom_fleet_owner;
REVOKE ALL ON FUNCTION mailroom_fleet._idna_domain(text) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION mailroom_fleet._idna_domain(text) TO mailroom_fleet_operator, mailroom_fleet_app;
COMMENT ON FUNCTION mailroom_fleet._idna_domain(text) IS
  'Internal: a domain''s wire form: the UTS 46 mapping (NFKC, lower case, ideographic full stops as dots), every label outside ASCII as its xn-- A-label. Total: never raises.';

CREATE FUNCTION mailroom_fleet.address_key(p_address text)
RETURNS text
LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE
AS $$
  SELECT pg_catalog.split_part(p_address, '@', 1)
         OPERATOR(pg_catalog.||) '@'
         OPERATOR(pg_catalog.||)
         CASE WHEN pg_catalog.octet_length(pg_catalog.split_part(p_address, '@', 2))
                   OPERATOR(pg_catalog.=) pg_catalog.length(pg_catalog.split_part(p_address, '@', 2))
              THEN pg_catalog.lower(pg_catalog.split_part(p_address, '@', 2))
              ELSE mailroom_fleet._idna_domain(pg_catalog.split_part(p_address, '@', 2)) END
$$;
ALTER FUNCTION mailroom_fleet.address_key(text) OWNER TO mailroom_fleet_owner;
REVOKE ALL ON FUNCTION mailroom_fleet.address_key(text) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION mailroom_fleet.address_key(text) TO mailroom_fleet_operator, mailroom_fleet_app;
COMMENT ON FUNCTION mailroom_fleet.address_key(text) IS
  'The shards'' address key (mailroom._address_key): the local part as given, "@", the domain lower-cased or, outside ASCII, in wire form (UTS 46 mapping, xn-- A-labels).';

CREATE FUNCTION mailroom_fleet.shard_key(p_address text)
RETURNS integer
LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE
SECURITY DEFINER
SET search_path = mailroom_fleet, pg_temp
AS $$
BEGIN
  IF p_address IS NULL OR strpos(p_address, '@') = 0 THEN
    RAISE EXCEPTION 'mailroom_fleet: address: an address local@domain is needed to choose its shard, got %',
      coalesce(quote_literal(p_address), 'NULL')
      USING ERRCODE = '22023';
  END IF;
  RETURN pg_catalog.hashtext(mailroom_fleet.address_key(p_address));
END
$$;
ALTER FUNCTION mailroom_fleet.shard_key(text) OWNER TO mailroom_fleet_owner;
REVOKE ALL ON FUNCTION mailroom_fleet.shard_key(text) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION mailroom_fleet.shard_key(text) TO mailroom_fleet_operator, mailroom_fleet_app;
COMMENT ON FUNCTION mailroom_fleet.shard_key(text) IS
  'The hash that routes mail to p_address: hashtext(address_key(p_address)). PL/Proxy sends it to partition shard_key & (partitions - 1).';

CREATE FUNCTION mailroom_fleet.partition_of(p_address text)
RETURNS integer
LANGUAGE sql STABLE
SECURITY DEFINER
SET search_path = mailroom_fleet, pg_temp
AS $$
  SELECT mailroom_fleet.shard_key(p_address) & (count(*)::integer - 1)
  FROM mailroom_fleet.shard_map
  HAVING count(*) > 0
$$;
ALTER FUNCTION mailroom_fleet.partition_of(text) OWNER TO mailroom_fleet_owner;
REVOKE ALL ON FUNCTION mailroom_fleet.partition_of(text) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION mailroom_fleet.partition_of(text) TO mailroom_fleet_operator, mailroom_fleet_app;
COMMENT ON FUNCTION mailroom_fleet.partition_of(text) IS
  'The partition (mailroom_fleet.shard_map) that mail to p_address goes to under the current shard map; NULL when the server mailroom_fleet has no partitions.';

CREATE FUNCTION mailroom_fleet.enqueue(
  p_to           text,
  p_subject      text        DEFAULT NULL,
  p_body_text    text        DEFAULT NULL,
  p_body_html    text        DEFAULT NULL,
  p_headers      jsonb       DEFAULT '{}',
  p_delivery_key text        DEFAULT NULL,
  p_send_at      timestamptz DEFAULT NULL,
  p_priority     integer     DEFAULT 0,
  p_sender       text        DEFAULT 'default',
  p_max_attempts integer     DEFAULT 5,
  p_template     text        DEFAULT NULL,
  p_vars         jsonb       DEFAULT '{}',
  p_on_ambiguous text        DEFAULT 'retry',
  p_stream       text        DEFAULT 'transactional',
  OUT shard      text,
  OUT id         bigint
)
LANGUAGE plproxy
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
  CLUSTER 'mailroom_fleet';
  RUN ON mailroom_fleet.shard_key(p_to);
  SELECT pg_catalog.current_database()::text AS shard,
         mailroom.enqueue(p_to, p_subject, p_body_text, p_body_html, p_headers, p_delivery_key, p_send_at,
                          p_priority, p_sender, p_max_attempts, p_template, p_vars, p_on_ambiguous,
                          p_stream) AS id;
$$;
ALTER FUNCTION mailroom_fleet.enqueue(text, text, text, text, jsonb, text, timestamptz, integer, text, integer, text, jsonb, text, text)
  OWNER TO mailroom_fleet_owner;
REVOKE ALL ON FUNCTION mailroom_fleet.enqueue(text, text, text, text, jsonb, text, timestamptz, integer, text, integer, text, jsonb, text, text)
  FROM PUBLIC;
GRANT EXECUTE ON FUNCTION mailroom_fleet.enqueue(text, text, text, text, jsonb, text, timestamptz, integer, text, integer, text, jsonb, text, text)
  TO mailroom_fleet_app;
COMMENT ON FUNCTION mailroom_fleet.enqueue(text, text, text, text, jsonb, text, timestamptz, integer, text, integer, text, jsonb, text, text) IS
  'mailroom.enqueue on the shard that p_to hashes to (shard_key): same arguments, same checks; returns that shard''s name and the mail''s id there. Commits on the shard at once (PL/Proxy runs in autocommit): it is not part of the caller''s transaction on the directory. The delivery key is idempotent per shard, so per address.';

COMMIT;
