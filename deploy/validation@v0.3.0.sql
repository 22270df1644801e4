-- Deploy mailroom:validation to pg (rework after v0.1.0)
-- requires: validation@v0.1.0
--
-- Hostile-input findings (tests/test_hostile.py, tests/test_hostile_properties.py):
-- * An address is limited in octets, as RFC 5321 counts (254 for the whole,
--   64 for the local part), not only in characters.
-- * Invisible, format, C1-control, private-use and non-character code points
--   (U+00A0, U+200B, U+2028, U+FEFF, ...) are refused anywhere in an address:
--   "a@x<U+200B>.de" looks like a@x.de and delivers nowhere. The classes are
--   spelled as code point ranges so the check does not depend on the
--   database's LC_CTYPE.
-- * The domain must have at least two labels (RFC 5321 2.3.5: only fully
--   qualified names in SMTP), its top label must end in a letter (RFC 3696 2
--   forbids all-numeric ones; every delegated TLD ends in a letter, so
--   "a@192.0.2.1" and "a@x.com1" are refused), and a label may not have "--"
--   in the 3rd and 4th position unless it is an xn-- A-label (RFC 5891).
-- * Header text (subject, header values) refuses every control character but
--   TAB, not only CR and LF, and is capped at 64 KiB; all headers of a mail
--   together are capped at 64 KiB as well.

BEGIN;

CREATE OR REPLACE FUNCTION mailroom._check_address(p_field text, p_address text)
RETURNS void
LANGUAGE plpgsql IMMUTABLE
SET search_path = mailroom, pg_temp
AS $$
DECLARE
  v_local  text;
  v_domain text;
  v_odd    text;
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
  -- (only non-ASCII text can hold one: plain ASCII skips the scan)
  v_odd := CASE WHEN octet_length(p_address) <> length(p_address) THEN substring(p_address FROM '[\u0080-\u009F\u00A0\u00AD\u034F\u061C\u115F\u1160\u17B4\u17B5\u180B-\u180F\u1680\u2000-\u200F\u2028-\u202F\u205F-\u206F\u3000\u3164\uE000-\uF8FF\uFDD0-\uFDEF\uFE00-\uFE0F\uFEFF\uFFA0\uFFF0-\uFFFF\U000E0000-\U000E0FFF\U000F0000-\U0010FFFF]') END;
  IF v_odd IS NOT NULL THEN
    RAISE EXCEPTION 'mailroom: %: contains an invisible, format or private-use character (U+%)',
      p_field, upper(lpad(to_hex(ascii(v_odd)), 4, '0')) USING ERRCODE = '22023';
  END IF;
  IF length(p_address) > 254 THEN
    RAISE EXCEPTION 'mailroom: %: longer than 254 characters', p_field USING ERRCODE = '22023';
  END IF;
  IF octet_length(p_address) > 254 THEN
    RAISE EXCEPTION 'mailroom: %: longer than 254 bytes in UTF-8 (% bytes)', p_field, octet_length(p_address)
      USING ERRCODE = '22023';
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
  IF octet_length(v_local) > 64 THEN
    RAISE EXCEPTION 'mailroom: %: local part longer than 64 bytes in UTF-8 (% bytes)', p_field, octet_length(v_local)
      USING ERRCODE = '22023';
  END IF;
  -- RFC 5322 dot-atom; non-ASCII allowed for SMTPUTF8 relays.
  IF v_local !~ '^[A-Za-z0-9!#$%&''*+/=?^_`{|}~\u0080-\U0010FFFF-]+(\.[A-Za-z0-9!#$%&''*+/=?^_`{|}~\u0080-\U0010FFFF-]+)*$' THEN
    RAISE EXCEPTION 'mailroom: %: "%" has an invalid local part', p_field, p_address USING ERRCODE = '22023';
  END IF;
  IF v_domain !~ '^([A-Za-z0-9\u0080-\U0010FFFF]([A-Za-z0-9\u0080-\U0010FFFF-]{0,61}[A-Za-z0-9\u0080-\U0010FFFF])?)(\.[A-Za-z0-9\u0080-\U0010FFFF]([A-Za-z0-9\u0080-\U0010FFFF-]{0,61}[A-Za-z0-9\u0080-\U0010FFFF])?)*$' THEN
    RAISE EXCEPTION 'mailroom: %: "%" has an invalid domain', p_field, p_address USING ERRCODE = '22023';
  END IF;
  IF position('.' IN v_domain) = 0 THEN
    RAISE EXCEPTION 'mailroom: %: "%" has no dot in its domain (a fully qualified domain is required)', p_field, p_address
      USING ERRCODE = '22023';
  END IF;
  IF v_domain !~ '[A-Za-z\u0080-\U0010FFFF]$' THEN
    RAISE EXCEPTION 'mailroom: %: "%" has a top-level domain that does not end in a letter', p_field, p_address
      USING ERRCODE = '22023', HINT = 'IP addresses are not accepted in place of a domain.';
  END IF;
  -- RFC 5891 4.2.3.1: "--" in the 3rd and 4th position is reserved for A-labels (xn--).
  IF v_domain ~* '(^|\.)([^.x][^.]|x[^.n])--' THEN
    RAISE EXCEPTION 'mailroom: %: "%" has a domain label with "--" in the 3rd and 4th position that is not an xn-- label',
      p_field, p_address USING ERRCODE = '22023';
  END IF;
END
$$;
ALTER FUNCTION mailroom._check_address(text, text) OWNER TO mailroom_owner;
REVOKE ALL ON FUNCTION mailroom._check_address(text, text) FROM PUBLIC;
COMMENT ON FUNCTION mailroom._check_address(text, text) IS
  'Internal: raise 22023 unless the value is a single plain email address: no display name, no quoted local part, no IP literal; at most 254 octets (local part 64); a dotted domain whose top label ends in a letter, no reserved ab-- labels; no whitespace, control, invisible or private-use code points.';

CREATE OR REPLACE FUNCTION mailroom._check_header_text(p_field text, p_value text)
RETURNS void
LANGUAGE plpgsql IMMUTABLE
SET search_path = mailroom, pg_temp
AS $$
BEGIN
  IF p_value ~ '[\r\n]' THEN
    RAISE EXCEPTION 'mailroom: %: contains CR or LF (header injection)', p_field USING ERRCODE = '22023';
  END IF;
  IF p_value ~ '[\x01-\x08\x0B\x0C\x0E-\x1F\x7F\u0080-\u009F\u2028\u2029]' THEN
    RAISE EXCEPTION 'mailroom: %: contains a control character (only TAB is allowed in a header)', p_field
      USING ERRCODE = '22023';
  END IF;
  IF octet_length(p_value) > 65536 THEN
    RAISE EXCEPTION 'mailroom: %: % bytes is over the maximum of 65536 bytes for a header', p_field, octet_length(p_value)
      USING ERRCODE = '22023';
  END IF;
END
$$;
ALTER FUNCTION mailroom._check_header_text(text, text) OWNER TO mailroom_owner;
REVOKE ALL ON FUNCTION mailroom._check_header_text(text, text) FROM PUBLIC;
COMMENT ON FUNCTION mailroom._check_header_text(text, text) IS
  'Internal: raise 22023 when a value bound for a header line contains CR, LF or another control character (TAB excepted), or is over 64 KiB.';

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
  IF octet_length(p_headers::text) > 65536 THEN
    RAISE EXCEPTION 'mailroom: headers: % bytes in all is over the maximum of 65536 bytes', octet_length(p_headers::text)
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
  'Internal: raise 22023 unless headers is an object (at most 64 KiB) of RFC 5322 field names mailroom does not own to single-line strings without control characters.';

COMMIT;
