-- Deploy mailroom:upsert_template to pg (rework for v0.4)
-- requires: upsert_template@v0.3.0
-- requires: split_messages
--
-- Issue 13, item 4: no p_now on anything a role can execute. The clock only
-- stamped created_at / updated_at, so it is simply the database clock now(),
-- with no twin. The checks are the v0.2.0 rework's, unchanged: the subject is
-- header text, the bodies are capped by max_body_bytes, as enqueue's are.

BEGIN;

DROP FUNCTION mailroom.upsert_template(text, text, text, text, timestamptz);

CREATE FUNCTION mailroom.upsert_template(
  p_key       text,
  p_subject   text,
  p_body_text text,
  p_body_html text DEFAULT NULL
)
RETURNS void
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = mailroom, pg_temp
AS $$
BEGIN
  IF p_key IS NULL OR p_key !~ '^[A-Za-z0-9][A-Za-z0-9_.:/-]{0,127}$' THEN
    RAISE EXCEPTION 'mailroom: key: "%" is not a template key (letters, digits and _ . : / -, at most 128)', p_key
      USING ERRCODE = '22023';
  END IF;
  IF p_subject IS NULL OR p_subject ~ '[\r\n]' THEN
    RAISE EXCEPTION 'mailroom: subject: must be given and must not contain CR or LF'
      USING ERRCODE = '22023';
  END IF;
  IF p_body_text IS NULL AND p_body_html IS NULL THEN
    RAISE EXCEPTION 'mailroom: body_text: a template needs a text or an HTML body'
      USING ERRCODE = '22023';
  END IF;
  -- The same limits as a literal mail's: the subject is a header line, the
  -- bodies are capped by the max_body_bytes setting.
  PERFORM mailroom._check_header_text('subject', p_subject);
  PERFORM mailroom._check_body('body_text', p_body_text);
  PERFORM mailroom._check_body('body_html', p_body_html);

  INSERT INTO mailroom.templates AS t (key, subject, body_text, body_html, created_at, updated_at)
  VALUES (p_key, p_subject, p_body_text, p_body_html, now(), now())
  ON CONFLICT (key) DO UPDATE
    SET subject = excluded.subject, body_text = excluded.body_text,
        body_html = excluded.body_html, updated_at = excluded.updated_at;
END
$$;
ALTER FUNCTION mailroom.upsert_template(text, text, text, text) OWNER TO mailroom_owner;
REVOKE ALL ON FUNCTION mailroom.upsert_template(text, text, text, text) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION mailroom.upsert_template(text, text, text, text)
  TO mailroom_app, mailroom_operator;
COMMENT ON FUNCTION mailroom.upsert_template(text, text, text, text) IS
  'Create or replace a template (Jinja2 syntax). The subject is checked as header text (no control characters, at most 64 KiB), each body against max_body_bytes. Mail already queued renders with the new version.';

COMMIT;
