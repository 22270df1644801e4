-- Deploy mailroom:submission_credentials to pg
-- requires: roles
-- requires: streams
-- requires: validation
-- requires: enqueue_campaign
-- requires: address_wire_form
-- requires: forget@v0.5.0

-- The SMTP submission front door (mailroom submit, docs/submission.md): an
-- application that can only speak SMTP logs in with a credential of its own
-- and may send as the From addresses or domains the credential names, on the
-- credential's sender profile and stream, at most per_minute mails.
--
-- No secrets in the database: a credential holds an scrypt hash
-- (scrypt$N$r$p$SALT$HASH, base64url; N >= 2^14, a 16-byte random salt),
-- made by `mailroom submit set-credential` before anything reaches
-- PostgreSQL, so the password never crosses the connection or lands in a
-- statement log. The submit server compares hashes itself (constant time).
--
-- The role mailroom_submission may read one credential's hash and identity
-- by user name (submission_login) and ask whether a recipient would be
-- refused (submission_recipient_refusal), and nothing else: the submit
-- server's login is granted mailroom_app (enqueue, rate_limit) and
-- mailroom_submission. Applications granted mailroom_app alone never see a hash.

BEGIN;

DO $$
BEGIN
  IF NOT EXISTS (SELECT FROM pg_catalog.pg_roles WHERE rolname = 'mailroom_submission') THEN
    CREATE ROLE mailroom_submission NOLOGIN;
  END IF;
END
$$;
COMMENT ON ROLE mailroom_submission IS
  'The SMTP submission server (mailroom submit): reads submission credentials by user name; its login also needs mailroom_app to enqueue.';
GRANT USAGE ON SCHEMA mailroom TO mailroom_submission;

CREATE TABLE mailroom.submission_credentials (
  username     text PRIMARY KEY
               CONSTRAINT submission_username_format CHECK (username ~ '^[A-Za-z0-9][A-Za-z0-9_.@+-]{0,127}$'),
  password_hash text NOT NULL
               CONSTRAINT submission_password_is_a_hash
               CHECK (password_hash ~ '^scrypt\$[0-9]{5,8}\$[0-9]{1,2}\$[0-9]{1,2}\$[A-Za-z0-9_-]{22,}\$[A-Za-z0-9_-]{43}$'),
  sender       text NOT NULL CONSTRAINT submission_sender_format CHECK (sender ~ '^[A-Za-z0-9][A-Za-z0-9_.:-]{0,63}$'),
  allowed_from text[] NOT NULL CONSTRAINT submission_allowed_from_nonempty CHECK (cardinality(allowed_from) BETWEEN 1 AND 100),
  stream       text NOT NULL REFERENCES mailroom.streams (name),
  per_minute   integer NOT NULL CONSTRAINT submission_per_minute_range CHECK (per_minute BETWEEN 1 AND 1000000),
  created_at   timestamptz NOT NULL DEFAULT now(),
  updated_at   timestamptz NOT NULL DEFAULT now()
);
ALTER TABLE mailroom.submission_credentials OWNER TO mailroom_owner;
REVOKE ALL ON mailroom.submission_credentials FROM PUBLIC;
COMMENT ON TABLE mailroom.submission_credentials IS
  'SMTP submission logins (mailroom submit): a salted scrypt hash, never a password; the sender profile, stream, From identities and rate the login may use.';
COMMENT ON COLUMN mailroom.submission_credentials.password_hash IS
  'scrypt$N$r$p$SALT$HASH (base64url), made by mailroom submit set-credential; compared by the submit server.';
COMMENT ON COLUMN mailroom.submission_credentials.allowed_from IS
  'Lower-case From addresses (ann@example.com) or whole domains (@example.com) the login may send as; the envelope sender and the From header must both match one.';

CREATE FUNCTION mailroom.set_submission_credential(
  p_username      text,
  p_password_hash text,
  p_sender        text,
  p_allowed_from  text[],
  p_per_minute    integer DEFAULT 60,
  p_stream        text    DEFAULT 'transactional'
)
RETURNS boolean
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = mailroom, pg_temp
AS $$
DECLARE
  v_from    text;
  v_allowed text[] := '{}';
  v_created boolean;
BEGIN
  IF p_username IS NULL OR p_username !~ '^[A-Za-z0-9][A-Za-z0-9_.@+-]{0,127}$' THEN
    RAISE EXCEPTION 'mailroom: username: "%" is not a user name (a letter or digit, then letters, digits and _ . @ + -, at most 128)', p_username
      USING ERRCODE = '22023';
  END IF;
  IF p_password_hash IS NULL
     OR p_password_hash !~ '^scrypt\$[0-9]{5,8}\$[0-9]{1,2}\$[0-9]{1,2}\$[A-Za-z0-9_-]{22,}\$[A-Za-z0-9_-]{43}$' THEN
    -- never echo it: it may be a password given by mistake
    RAISE EXCEPTION 'mailroom: password_hash: not an scrypt$N$r$p$SALT$HASH hash'
      USING ERRCODE = '22023', HINT = 'mailroom submit set-credential hashes the password before it reaches the database.';
  END IF;
  IF p_sender IS NULL OR p_sender !~ '^[A-Za-z0-9][A-Za-z0-9_.:-]{0,63}$' THEN
    RAISE EXCEPTION 'mailroom: sender: "%" is not a sender name (letters, digits and _ . : -, at most 64)', p_sender
      USING ERRCODE = '22023';
  END IF;
  IF p_allowed_from IS NULL OR cardinality(p_allowed_from) NOT BETWEEN 1 AND 100 THEN
    RAISE EXCEPTION 'mailroom: allowed_from: give 1 to 100 addresses or @domains' USING ERRCODE = '22023';
  END IF;
  FOREACH v_from IN ARRAY p_allowed_from LOOP
    v_from := lower(btrim(v_from));
    IF v_from IS NULL
       OR v_from !~ '^([a-z0-9!#$%&''*+/=?^_`{|}~.-]{1,64})?@[a-z0-9]([a-z0-9-]{0,62}[a-z0-9])?(\.[a-z0-9]([a-z0-9-]{0,62}[a-z0-9])?)+$' THEN
      RAISE EXCEPTION 'mailroom: allowed_from: "%" is neither an address nor @domain (ASCII; an IDN domain as A-labels)', v_from
        USING ERRCODE = '22023';
    END IF;
    v_allowed := v_allowed || v_from;
  END LOOP;
  IF p_per_minute IS NULL OR p_per_minute NOT BETWEEN 1 AND 1000000 THEN
    PERFORM mailroom._check_range('per_minute', p_per_minute, 1, 1000000);
  END IF;
  PERFORM mailroom._check_stream(p_stream);

  INSERT INTO mailroom.submission_credentials AS c (username, password_hash, sender, allowed_from, stream, per_minute)
  VALUES (p_username, p_password_hash, p_sender, v_allowed, p_stream, p_per_minute)
  ON CONFLICT (username) DO UPDATE
    SET password_hash = excluded.password_hash, sender = excluded.sender, allowed_from = excluded.allowed_from,
        stream = excluded.stream, per_minute = excluded.per_minute, updated_at = now()
  RETURNING (xmax = 0) INTO v_created;
  RETURN v_created;
END
$$;
ALTER FUNCTION mailroom.set_submission_credential(text, text, text, text[], integer, text) OWNER TO mailroom_owner;
REVOKE ALL ON FUNCTION mailroom.set_submission_credential(text, text, text, text[], integer, text) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION mailroom.set_submission_credential(text, text, text, text[], integer, text) TO mailroom_operator;
COMMENT ON FUNCTION mailroom.set_submission_credential(text, text, text, text[], integer, text) IS
  'Operator: add or replace an SMTP submission login (true: added, false: replaced). p_password_hash is scrypt$N$r$p$SALT$HASH (mailroom submit set-credential makes it); p_allowed_from lists the addresses and @domains it may send as.';

CREATE FUNCTION mailroom.drop_submission_credential(p_username text)
RETURNS boolean
LANGUAGE sql
SECURITY DEFINER
SET search_path = mailroom, pg_temp
AS $$
  WITH gone AS (DELETE FROM mailroom.submission_credentials c WHERE c.username = p_username RETURNING 1)
  SELECT EXISTS (SELECT FROM gone)
$$;
ALTER FUNCTION mailroom.drop_submission_credential(text) OWNER TO mailroom_owner;
REVOKE ALL ON FUNCTION mailroom.drop_submission_credential(text) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION mailroom.drop_submission_credential(text) TO mailroom_operator;
COMMENT ON FUNCTION mailroom.drop_submission_credential(text) IS
  'Operator: remove an SMTP submission login (false: there was none); its next login is refused with 535.';

CREATE FUNCTION mailroom.submission_credential_list()
RETURNS TABLE (username text, sender text, allowed_from text[], stream text, per_minute integer,
               created_at timestamptz, updated_at timestamptz)
LANGUAGE sql
STABLE
SECURITY DEFINER
SET search_path = mailroom, pg_temp
AS $$
  SELECT c.username, c.sender, c.allowed_from, c.stream, c.per_minute, c.created_at, c.updated_at
  FROM mailroom.submission_credentials c ORDER BY c.username
$$;
ALTER FUNCTION mailroom.submission_credential_list() OWNER TO mailroom_owner;
REVOKE ALL ON FUNCTION mailroom.submission_credential_list() FROM PUBLIC;
GRANT EXECUTE ON FUNCTION mailroom.submission_credential_list() TO mailroom_operator;
COMMENT ON FUNCTION mailroom.submission_credential_list() IS
  'Operator: the SMTP submission logins and what each may send as, without their hashes.';

CREATE FUNCTION mailroom.submission_login(p_username text)
RETURNS TABLE (password_hash text, sender text, allowed_from text[], stream text, per_minute integer)
LANGUAGE sql
STABLE
SECURITY DEFINER
SET search_path = mailroom, pg_temp
AS $$
  SELECT c.password_hash, c.sender, c.allowed_from, c.stream, c.per_minute
  FROM mailroom.submission_credentials c WHERE c.username = p_username
$$;
ALTER FUNCTION mailroom.submission_login(text) OWNER TO mailroom_owner;
REVOKE ALL ON FUNCTION mailroom.submission_login(text) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION mailroom.submission_login(text) TO mailroom_submission;
COMMENT ON FUNCTION mailroom.submission_login(text) IS
  'The submit server: one login''s hash and identity (no row: no such login). Only mailroom_submission.';

-- RCPT TO is answered one recipient at a time (RFC 5321), so the submit
-- server refuses a recipient there, and the mail goes on to the others:
-- an address enqueue would refuse (its exact message), or one suppressed for
-- the login's stream or forgotten, which enqueue would only record as
-- cancelled while the client believed it queued.
CREATE FUNCTION mailroom.submission_recipient_refusal(p_username text, p_address text)
RETURNS text
LANGUAGE plpgsql
STABLE
SECURITY DEFINER
SET search_path = mailroom, pg_temp
AS $$
DECLARE
  v_stream text;
BEGIN
  SELECT c.stream INTO v_stream FROM mailroom.submission_credentials c WHERE c.username = p_username;
  IF NOT FOUND THEN
    RAISE EXCEPTION 'mailroom: username: no submission login "%"', p_username USING ERRCODE = '22023';
  END IF;
  IF NOT coalesce(mailroom._address_ok(p_address), false) THEN
    BEGIN
      PERFORM mailroom._check_address('to', p_address);
    EXCEPTION WHEN invalid_parameter_value THEN
      RETURN 'invalid: ' || SQLERRM;
    END;
  END IF;
  IF EXISTS (SELECT FROM mailroom.suppressions s
             WHERE s.address_key = mailroom._address_key(p_address) AND (s.stream IS NULL OR s.stream = v_stream))
     OR mailroom.is_forgotten(p_address) THEN
    RETURN 'suppressed';
  END IF;
  RETURN NULL;
END
$$;
ALTER FUNCTION mailroom.submission_recipient_refusal(text, text) OWNER TO mailroom_owner;
REVOKE ALL ON FUNCTION mailroom.submission_recipient_refusal(text, text) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION mailroom.submission_recipient_refusal(text, text) TO mailroom_submission;
COMMENT ON FUNCTION mailroom.submission_recipient_refusal(text, text) IS
  'The submit server, at RCPT TO: why a recipient of this login would not be mailed (invalid: <enqueue''s message>, or suppressed), NULL when it would. Only mailroom_submission.';

COMMIT;
