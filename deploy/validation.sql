-- Deploy mailroom:validation to pg (rework after v0.3.0)
-- requires: validation@v0.3.0
--
-- One mail, one recipient (issue 14): _check_headers refuses every header
-- mailroom owns, by name compared case-insensitively, with SQLSTATE 22023 and
-- the reason; the runner (runner/mailroom/render.py, OWNED) holds the same
-- list and fails a mail queued before this check instead of sending it wrong.
-- * To, Cc, Bcc: a mail has one envelope recipient, p_to. A Bcc in the
--   headers was shown to the To recipient and never reached the envelope;
--   a Cc was never delivered either. Enqueue one mail per recipient.
-- * Subject: p_subject (or the template's) is the subject; a second one gave
--   the mail two Subject headers.
-- * Message-ID (from the delivery key), Date (the time of sending),
--   MIME-Version, Content-Type, Content-Transfer-Encoding (the MIME
--   structure the runner builds), Return-Path (written by the receiving
--   server from the envelope sender).
-- * Two names for one header ("From" and "FROM"): names are case-insensitive
--   (RFC 5322 1.2.2), and a header given twice is one the runner could only
--   guess between. From itself stays allowed, once: it replaces --from.
--
-- Earlier reworks (after v0.1.0, kept here):
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
  -- "Judy <judy@example.com>": say what is wrong rather than "whitespace".
  -- The address is what is stored, suppressed and rate-limited by domain,
  -- and the runner writes the To header from it alone.
  IF p_address ~ '<[^<>]*@[^<>]*>[[:space:]]*$' THEN
    RAISE EXCEPTION 'mailroom: %: display names and angle brackets are not accepted ("%"): pass the bare address, %',
      p_field, p_address, substring(p_address FROM '<([^<>]*)>[[:space:]]*$')
      USING ERRCODE = '22023',
            HINT = 'The To header shows the address alone; greet the recipient by name in the body (a template variable).';
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
  'Internal: raise 22023 unless the value is a single plain email address: no display name (refused as such, naming the bare address), no quoted local part, no IP literal; at most 254 octets (local part 64); a dotted domain whose top label ends in a letter, no reserved ab-- labels; no whitespace, control, invisible or private-use code points.';

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
  v_owned text;
  v_seen  text[] := '{}';   -- the names so far, in lower case ...
  v_given text[] := '{}';   -- ... and as given
  v_twin  integer;
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
    -- The same list and reasons as OWNED in runner/mailroom/render.py.
    v_owned := CASE lower(v_name)
      WHEN 'to'                        THEN 'the recipient is p_to'
      WHEN 'cc'                        THEN 'one mail, one recipient: enqueue one mail per recipient'
      WHEN 'bcc'                       THEN 'one mail, one recipient: enqueue one mail per recipient'
      WHEN 'subject'                   THEN 'the subject is p_subject or the template''s'
      WHEN 'message-id'                THEN 'it derives from the delivery key'
      WHEN 'date'                      THEN 'it is the time of sending'
      WHEN 'mime-version'              THEN 'mailroom builds the MIME structure'
      WHEN 'content-type'              THEN 'mailroom builds the MIME structure'
      WHEN 'content-transfer-encoding' THEN 'mailroom builds the MIME structure'
      WHEN 'return-path'               THEN 'the receiving server writes it from the envelope sender'
    END;
    IF v_owned IS NOT NULL THEN
      RAISE EXCEPTION 'mailroom: headers: "%" is set by mailroom (%)', v_name, v_owned
        USING ERRCODE = '22023';
    END IF;
    v_twin := array_position(v_seen, lower(v_name));
    IF v_twin IS NOT NULL THEN
      RAISE EXCEPTION 'mailroom: headers: "%" and "%" are the same header (header names are case-insensitive)',
        v_given[v_twin], v_name USING ERRCODE = '22023';
    END IF;
    v_seen := v_seen || lower(v_name);
    v_given := v_given || v_name;
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
  'Internal: raise 22023 unless headers is an object (at most 64 KiB) of RFC 5322 field names to single-line strings without control characters, each name once in any case, none of them a header mailroom owns (To, Cc, Bcc, Subject, Message-ID, Date, MIME-Version, Content-Type, Content-Transfer-Encoding, Return-Path: one mail, one recipient).';

-- Unchanged since v0.1.0, defined here so that this file holds every check.

CREATE OR REPLACE FUNCTION mailroom._check_body(p_field text, p_value text)
RETURNS void
LANGUAGE plpgsql STABLE
SET search_path = mailroom, pg_temp
AS $$
DECLARE
  v_max bigint := mailroom._setting('max_body_bytes')::bigint;
BEGIN
  IF octet_length(p_value) > v_max THEN
    RAISE EXCEPTION 'mailroom: %: % bytes is over the maximum of % bytes', p_field, octet_length(p_value), v_max
      USING ERRCODE = '22023', HINT = 'The limit is the setting max_body_bytes.';
  END IF;
END
$$;
ALTER FUNCTION mailroom._check_body(text, text) OWNER TO mailroom_owner;
REVOKE ALL ON FUNCTION mailroom._check_body(text, text) FROM PUBLIC;
COMMENT ON FUNCTION mailroom._check_body(text, text) IS
  'Internal: raise 22023 when a body is larger than the max_body_bytes setting.';

CREATE OR REPLACE FUNCTION mailroom._check_range(p_field text, p_value numeric, p_min numeric, p_max numeric)
RETURNS void
LANGUAGE plpgsql IMMUTABLE
SET search_path = mailroom, pg_temp
AS $$
BEGIN
  IF p_value IS NULL OR p_value < p_min OR p_value > p_max THEN
    RAISE EXCEPTION 'mailroom: %: must be between % and %, got %', p_field, p_min, p_max, coalesce(p_value::text, 'NULL')
      USING ERRCODE = '22023';
  END IF;
END
$$;
ALTER FUNCTION mailroom._check_range(text, numeric, numeric, numeric) OWNER TO mailroom_owner;
REVOKE ALL ON FUNCTION mailroom._check_range(text, numeric, numeric, numeric) FROM PUBLIC;
COMMENT ON FUNCTION mailroom._check_range(text, numeric, numeric, numeric) IS
  'Internal: raise 22023 unless min <= value <= max.';

CREATE OR REPLACE FUNCTION mailroom._check_lease(p_lease interval)
RETURNS void
LANGUAGE plpgsql IMMUTABLE
SET search_path = mailroom, pg_temp
AS $$
BEGIN
  IF p_lease IS NULL OR p_lease <= interval '0' OR p_lease > interval '1 day' THEN
    RAISE EXCEPTION 'mailroom: lease: must be more than 0 and at most 1 day, got %', coalesce(p_lease::text, 'NULL')
      USING ERRCODE = '22023';
  END IF;
END
$$;
ALTER FUNCTION mailroom._check_lease(interval) OWNER TO mailroom_owner;
REVOKE ALL ON FUNCTION mailroom._check_lease(interval) FROM PUBLIC;
COMMENT ON FUNCTION mailroom._check_lease(interval) IS
  'Internal: raise 22023 unless 0 < lease <= 1 day.';

COMMIT;
