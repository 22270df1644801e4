-- Deploy mailroom:forgotten_addresses to pg
-- requires: roles
-- requires: schema

-- Forgotten addresses (mailroom.forget, deploy/forget.sql): the hashes of
-- the addresses erased, a suppression for every stream that names nobody,
-- and the installation's random key they are hashed under. A change of its
-- own, early in the plan, because three later ones read it: claim_batch's
-- gate, enqueue's suppressed shortcut and enqueue_campaign.

BEGIN;

CREATE TABLE mailroom.erasure_pepper (
  only_row  boolean PRIMARY KEY DEFAULT true CONSTRAINT erasure_pepper_one_row CHECK (only_row),
  inner_pad bytea NOT NULL CONSTRAINT erasure_pepper_inner_size CHECK (octet_length(inner_pad) = 64),
  outer_pad bytea NOT NULL CONSTRAINT erasure_pepper_outer_size CHECK (octet_length(outer_pad) = 64),
  created_at timestamptz NOT NULL DEFAULT now()
);
ALTER TABLE mailroom.erasure_pepper OWNER TO mailroom_owner;
REVOKE ALL ON mailroom.erasure_pepper FROM PUBLIC;
COMMENT ON TABLE mailroom.erasure_pepper IS
  'Owner-only: this installation''s random HMAC key for forgotten addresses, as its HMAC-SHA256 inner and outer pads (key XOR 0x36, key XOR 0x5c). A pepper, not a credential: it keeps the hashes in forgotten_addresses from being matched against guessed addresses. Changing it un-forgets every address.';

-- 64 random bytes (four gen_random_uuid(): 488 random bits), XORed with
-- the pads byte by byte.
DO $$
DECLARE
  v_key   bytea := decode(replace(gen_random_uuid()::text || gen_random_uuid()::text
                                  || gen_random_uuid()::text || gen_random_uuid()::text, '-', ''), 'hex');
  v_inner bytea := v_key;
  v_outer bytea := v_key;
BEGIN
  FOR i IN 0 .. 63 LOOP
    v_inner := set_byte(v_inner, i, get_byte(v_key, i) # 54);
    v_outer := set_byte(v_outer, i, get_byte(v_key, i) # 92);
  END LOOP;
  INSERT INTO mailroom.erasure_pepper (inner_pad, outer_pad) VALUES (v_inner, v_outer);
END
$$;

CREATE TABLE mailroom.forgotten_addresses (
  key_hash     bytea PRIMARY KEY CONSTRAINT forgotten_addresses_hash_size CHECK (octet_length(key_hash) = 32),
  forgotten_at timestamptz NOT NULL DEFAULT now(),
  in_flight    bigint[] NOT NULL DEFAULT '{}'
);
ALTER TABLE mailroom.forgotten_addresses OWNER TO mailroom_owner;
REVOKE ALL ON mailroom.forgotten_addresses FROM PUBLIC;
COMMENT ON TABLE mailroom.forgotten_addresses IS
  'Owner-only: the addresses mailroom.forget erased, as HMAC-SHA256 of their lower-cased address key under erasure_pepper. A suppression for every stream that names nobody: claim_batch''s gate, enqueue and enqueue_campaign refuse mail to them. in_flight: the ids of their mail that was being sent when they were forgotten, whose outcome the next forget erases.';

-- The hash of an address key (mailroom._address_key). claim_batch's gate
-- writes the same expression out (it must be inlined).
CREATE OR REPLACE FUNCTION mailroom._forgotten_hash(p_address_key text)
RETURNS bytea
LANGUAGE sql
STABLE STRICT
SET search_path = mailroom, pg_temp
AS $$
  SELECT sha256(k.outer_pad || sha256(k.inner_pad || convert_to(lower(p_address_key), 'UTF8')))
  FROM mailroom.erasure_pepper k
$$;
ALTER FUNCTION mailroom._forgotten_hash(text) OWNER TO mailroom_owner;
REVOKE ALL ON FUNCTION mailroom._forgotten_hash(text) FROM PUBLIC;
COMMENT ON FUNCTION mailroom._forgotten_hash(text) IS
  'Internal: the key of an address key (lower-cased) in forgotten_addresses: HMAC-SHA256 under erasure_pepper.';

COMMIT;
