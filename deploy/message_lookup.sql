-- Deploy mailroom:message_lookup to pg
-- requires: table_contents
-- requires: role_feedback

-- Providers report a mail by its Message-ID (SES mail.commonHeaders, the
-- headers Mailgun and SendGrid echo back), and a DSN quotes it too. The
-- runner's Message-ID is <first 40 hex digits of sha256(delivery key)@domain>
-- (runner/mailroom/render.py), one-way by design, so finding the mail needs
-- an index on that digest. It holds 8 bytes of it (a 64-bit prefix: a
-- collision among a billion mails is about 3 %, and the lookup compares the
-- whole 40 digits anyway) to keep each content insert's extra index entry
-- small. The domain is not compared: runners may be configured with
-- different --message-id-domain values over time.

BEGIN;

-- Schema-qualified throughout and without SET: an index expression runs
-- under whatever search_path the inserting session has.
CREATE FUNCTION mailroom._message_ref(p_delivery_key text)
RETURNS bytea
LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE
AS $$
  -- convert_to is only STABLE because of the client encoding, which it
  -- does not read when given 'UTF8' explicitly: the bytes depend on the
  -- text alone, as the index needs.
  SELECT pg_catalog.substr(pg_catalog.sha256(pg_catalog.convert_to(p_delivery_key, 'UTF8')), 1, 8)
$$;
ALTER FUNCTION mailroom._message_ref(text) OWNER TO mailroom_owner;
REVOKE ALL ON FUNCTION mailroom._message_ref(text) FROM PUBLIC;
COMMENT ON FUNCTION mailroom._message_ref(text) IS
  'Internal (index contents_message_ref_idx): the first 8 bytes of sha256 of a delivery key, the start of the Message-ID the runner gives that mail.';

CREATE INDEX contents_message_ref_idx ON mailroom.contents (mailroom._message_ref(delivery_key));
COMMENT ON INDEX mailroom.contents_message_ref_idx IS
  'Finds a mail by its Message-ID (message_by_message_id): feedback from providers and DSNs names mail that way.';

CREATE FUNCTION mailroom.message_by_message_id(p_message_id text)
RETURNS bigint
LANGUAGE plpgsql STABLE
SECURITY DEFINER
SET search_path = mailroom, pg_temp
AS $$
DECLARE
  v_hex text;
  v_id  bigint;
BEGIN
  IF length(p_message_id) > 1000 THEN
    RAISE EXCEPTION 'mailroom: message_id: at most 1000 characters, got %', length(p_message_id) USING ERRCODE = '22023';
  END IF;
  -- '<hex@domain>', or without the brackets as some providers quote it.
  v_hex := substring(lower(btrim(p_message_id)) FROM '^<?([0-9a-f]{40})@[^<>@[:space:]]+>?$');
  IF v_hex IS NULL THEN
    RETURN NULL;   -- not a Message-ID mailroom wrote
  END IF;
  SELECT c.id INTO v_id
  FROM mailroom.contents c
  WHERE mailroom._message_ref(c.delivery_key) = decode(left(v_hex, 16), 'hex')
    AND left(encode(sha256(convert_to(c.delivery_key, 'UTF8')), 'hex'), 40) = v_hex
  ORDER BY c.id
  LIMIT 1;
  RETURN v_id;
END
$$;
ALTER FUNCTION mailroom.message_by_message_id(text) OWNER TO mailroom_owner;
REVOKE ALL ON FUNCTION mailroom.message_by_message_id(text) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION mailroom.message_by_message_id(text) TO mailroom_feedback, mailroom_operator;
COMMENT ON FUNCTION mailroom.message_by_message_id(text) IS
  'The id of the mail a Message-ID written by a mailroom runner names (<40 hex digits@domain>, brackets optional, any domain); NULL when it is not one or the mail is unknown (pruned). For feedback reporters and operators.';

COMMIT;
