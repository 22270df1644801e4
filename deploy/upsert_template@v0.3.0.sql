-- Deploy mailroom:upsert_template to pg
-- requires: table_templates
-- requires: validation
--
-- upsert_template (created by table_templates) gets the checks a literal mail
-- has. Hostile-input findings (tests/test_hostile.py): a 3 MB body was stored
-- although enqueue refuses bodies over max_body_bytes, and a subject with a
-- vertical tab or 1 MB of text was stored, bound for a header line.

BEGIN;

CREATE OR REPLACE FUNCTION mailroom.upsert_template(
  p_key       text,
  p_subject   text,
  p_body_text text,
  p_body_html text DEFAULT NULL,
  p_now       timestamptz DEFAULT now()
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
  VALUES (p_key, p_subject, p_body_text, p_body_html, p_now, p_now)
  ON CONFLICT (key) DO UPDATE
    SET subject = excluded.subject, body_text = excluded.body_text,
        body_html = excluded.body_html, updated_at = excluded.updated_at;
END
$$;
ALTER FUNCTION mailroom.upsert_template(text, text, text, text, timestamptz) OWNER TO mailroom_owner;
REVOKE ALL ON FUNCTION mailroom.upsert_template(text, text, text, text, timestamptz) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION mailroom.upsert_template(text, text, text, text, timestamptz)
  TO mailroom_app, mailroom_operator;
COMMENT ON FUNCTION mailroom.upsert_template(text, text, text, text, timestamptz) IS
  'Create or replace a template (Jinja2 syntax). The subject is checked as header text (no control characters, at most 64 KiB), each body against max_body_bytes. Mail already queued renders with the new version.';

COMMIT;
