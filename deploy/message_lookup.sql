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

-- The digest's first 8 bytes, written as an expression of built-in
-- immutable functions only, so that no function call of ours runs per
-- inserted row: a SQL function doing the same is not inlined into an index
-- expression when it calls a STABLE function such as convert_to, and cost
-- several times more. decode(..., 'escape') of the key with its
-- backslashes doubled is the key's bytes in the database encoding: UTF-8,
-- as the runner hashes it (a database in another encoding finds mail
-- whose delivery key is ASCII only).
CREATE INDEX contents_message_ref_idx ON mailroom.contents
  (substr(sha256(decode(replace(delivery_key, '\', '\\'), 'escape')), 1, 8));
COMMENT ON INDEX mailroom.contents_message_ref_idx IS
  'Finds a mail by its Message-ID (message_by_message_id): feedback from providers and DSNs names mail that way. The first 8 bytes of sha256 of the delivery key.';

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
  WHERE substr(sha256(decode(replace(c.delivery_key, '\', '\\'), 'escape')), 1, 8) = decode(left(v_hex, 16), 'hex')
    AND left(encode(sha256(decode(replace(c.delivery_key, '\', '\\'), 'escape')), 'hex'), 40) = v_hex
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
