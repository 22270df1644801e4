-- Revert mailroom:validation from pg: the v0.1.0 address and header checks back.

BEGIN;

CREATE OR REPLACE FUNCTION mailroom._check_address(p_field text, p_address text)
RETURNS void
LANGUAGE plpgsql IMMUTABLE
SET search_path = mailroom, pg_temp
AS $$
DECLARE
  v_local  text;
  v_domain text;
BEGIN
  IF p_address IS NULL OR p_address = '' THEN
    RAISE EXCEPTION 'mailroom: %: an email address is required', p_field USING ERRCODE = '22023';
  END IF;
  IF p_address ~ '[\r\n]' THEN
    RAISE EXCEPTION 'mailroom: %: contains CR or LF', p_field USING ERRCODE = '22023';
  END IF;
  IF p_address ~ '[[:space:][:cntrl:]]' THEN
    RAISE EXCEPTION 'mailroom: %: contains whitespace or a control character', p_field USING ERRCODE = '22023';
  END IF;
  IF length(p_address) > 254 THEN
    RAISE EXCEPTION 'mailroom: %: longer than 254 characters', p_field USING ERRCODE = '22023';
  END IF;
  IF position('@' IN p_address) = 0 THEN
    RAISE EXCEPTION 'mailroom: %: "%" is not an email address (no @)', p_field, p_address USING ERRCODE = '22023';
  END IF;
  IF p_address ~ '@.*@' THEN
    RAISE EXCEPTION 'mailroom: %: "%" has more than one @', p_field, p_address USING ERRCODE = '22023';
  END IF;
  v_local := split_part(p_address, '@', 1);
  v_domain := split_part(p_address, '@', 2);
  IF length(v_local) > 64 THEN
    RAISE EXCEPTION 'mailroom: %: local part longer than 64 characters', p_field USING ERRCODE = '22023';
  END IF;
  -- RFC 5322 dot-atom; non-ASCII allowed for SMTPUTF8 relays.
  IF v_local !~ '^[A-Za-z0-9!#$%&''*+/=?^_`{|}~\u0080-\U0010FFFF-]+(\.[A-Za-z0-9!#$%&''*+/=?^_`{|}~\u0080-\U0010FFFF-]+)*$' THEN
    RAISE EXCEPTION 'mailroom: %: "%" has an invalid local part', p_field, p_address USING ERRCODE = '22023';
  END IF;
  IF v_domain !~ '^([A-Za-z0-9\u0080-\U0010FFFF]([A-Za-z0-9\u0080-\U0010FFFF-]{0,61}[A-Za-z0-9\u0080-\U0010FFFF])?)(\.[A-Za-z0-9\u0080-\U0010FFFF]([A-Za-z0-9\u0080-\U0010FFFF-]{0,61}[A-Za-z0-9\u0080-\U0010FFFF])?)*$' THEN
    RAISE EXCEPTION 'mailroom: %: "%" has an invalid domain', p_field, p_address USING ERRCODE = '22023';
  END IF;
END
$$;
ALTER FUNCTION mailroom._check_address(text, text) OWNER TO mailroom_owner;
REVOKE ALL ON FUNCTION mailroom._check_address(text, text) FROM PUBLIC;
COMMENT ON FUNCTION mailroom._check_address(text, text) IS
  'Internal: raise 22023 unless the value is a single plain email address (no display name, no quoted local part).';

CREATE OR REPLACE FUNCTION mailroom._check_header_text(p_field text, p_value text)
RETURNS void
LANGUAGE plpgsql IMMUTABLE
SET search_path = mailroom, pg_temp
AS $$
BEGIN
  IF p_value ~ '[\r\n]' THEN
    RAISE EXCEPTION 'mailroom: %: contains CR or LF (header injection)', p_field USING ERRCODE = '22023';
  END IF;
END
$$;
ALTER FUNCTION mailroom._check_header_text(text, text) OWNER TO mailroom_owner;
REVOKE ALL ON FUNCTION mailroom._check_header_text(text, text) FROM PUBLIC;
COMMENT ON FUNCTION mailroom._check_header_text(text, text) IS
  'Internal: raise 22023 when a value bound for a header line contains CR or LF.';

CREATE OR REPLACE FUNCTION mailroom._check_headers(p_headers jsonb)
RETURNS void
LANGUAGE plpgsql IMMUTABLE
SET search_path = mailroom, pg_temp
AS $$
DECLARE
  v_name  text;
  v_value jsonb;
BEGIN
  IF p_headers IS NULL OR jsonb_typeof(p_headers) <> 'object' THEN
    RAISE EXCEPTION 'mailroom: headers: must be a JSON object of header name to text value'
      USING ERRCODE = '22023';
  END IF;
  FOR v_name, v_value IN SELECT key, value FROM jsonb_each(p_headers) LOOP
    -- RFC 5322 field name: printable US-ASCII except colon.
    IF v_name !~ '^[!-9;-~]{1,76}$' THEN
      RAISE EXCEPTION 'mailroom: headers: "%" is not a valid header field name', v_name
        USING ERRCODE = '22023';
    END IF;
    IF lower(v_name) IN ('message-id', 'date', 'to', 'mime-version', 'content-type',
                         'content-transfer-encoding') THEN
      RAISE EXCEPTION 'mailroom: headers: % is set by mailroom and cannot be given', v_name
        USING ERRCODE = '22023', HINT = 'The Message-ID derives from the delivery key; To is the recipient.';
    END IF;
    IF jsonb_typeof(v_value) <> 'string' THEN
      RAISE EXCEPTION 'mailroom: headers.%: value must be a string, got %', v_name, jsonb_typeof(v_value)
        USING ERRCODE = '22023';
    END IF;
    PERFORM mailroom._check_header_text('headers.' || v_name, v_value #>> '{}');
  END LOOP;
END
$$;
ALTER FUNCTION mailroom._check_headers(jsonb) OWNER TO mailroom_owner;
REVOKE ALL ON FUNCTION mailroom._check_headers(jsonb) FROM PUBLIC;
COMMENT ON FUNCTION mailroom._check_headers(jsonb) IS
  'Internal: raise 22023 unless headers is an object of RFC 5322 field names mailroom does not own to single-line strings.';

COMMIT;
