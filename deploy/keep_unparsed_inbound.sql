-- Deploy mailroom:keep_unparsed_inbound to pg
-- requires: table_inbound_unparsed

-- mailroom inbound answers 250 only after this returned and committed, so an
-- inbound mail it could not use is either here or still with the sending
-- MTA, which retries after a 451. The limits match the receiver's: 25 MiB a
-- message (its SMTP SIZE limit), a reason of at most 500 characters.

BEGIN;

CREATE FUNCTION mailroom.keep_unparsed_inbound(
  p_raw           bytea,
  p_reason        text,
  p_envelope_from text,
  p_envelope_to   text
)
RETURNS bigint
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = mailroom, pg_temp
AS $$
DECLARE
  v_id bigint;
BEGIN
  IF p_raw IS NULL THEN
    RAISE EXCEPTION 'mailroom: raw: the message is required' USING ERRCODE = '22023';
  END IF;
  IF octet_length(p_raw) > 26214400 THEN
    RAISE EXCEPTION 'mailroom: raw: at most 25 MiB (26214400 bytes), got % bytes', octet_length(p_raw) USING ERRCODE = '22023';
  END IF;
  IF p_reason IS NULL OR p_reason = '' OR length(p_reason) > 500 OR p_reason ~ '[[:cntrl:]]' THEN
    RAISE EXCEPTION 'mailroom: reason: required, at most 500 characters without control characters' USING ERRCODE = '22023';
  END IF;
  IF length(p_envelope_from) > 1000 OR p_envelope_from ~ '[[:cntrl:]]' THEN
    RAISE EXCEPTION 'mailroom: envelope_from: at most 1000 characters without control characters' USING ERRCODE = '22023';
  END IF;
  IF length(p_envelope_to) > 10000 OR p_envelope_to ~ '[[:cntrl:]]' THEN
    RAISE EXCEPTION 'mailroom: envelope_to: at most 10000 characters without control characters' USING ERRCODE = '22023';
  END IF;
  INSERT INTO mailroom.inbound_unparsed (reason, envelope_from, envelope_to, size, raw)
  VALUES (p_reason, p_envelope_from, p_envelope_to, octet_length(p_raw), p_raw)
  RETURNING id INTO v_id;
  RETURN v_id;
END
$$;
ALTER FUNCTION mailroom.keep_unparsed_inbound(bytea, text, text, text) OWNER TO mailroom_owner;
REVOKE ALL ON FUNCTION mailroom.keep_unparsed_inbound(bytea, text, text, text) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION mailroom.keep_unparsed_inbound(bytea, text, text, text) TO mailroom_feedback;
COMMENT ON FUNCTION mailroom.keep_unparsed_inbound(bytea, text, text, text) IS
  'Keep an inbound mail that could not be parsed or matched, whole, with the reason (a code first: malformed_mime, too_large, bad_verp_signature, loop, unmatched, …) and its envelope; returns its id in mailroom.inbound_unparsed. At most 25 MiB.';

COMMIT;
