-- Deploy mailroom:table_settings to pg
-- requires: roles

BEGIN;

CREATE TABLE mailroom.settings (
  key         text PRIMARY KEY,
  value       text NOT NULL,
  description text NOT NULL,
  CONSTRAINT settings_key_format CHECK (key ~ '^[a-z][a-z0-9_]*$')
);
ALTER TABLE mailroom.settings OWNER TO mailroom_owner;
COMMENT ON TABLE mailroom.settings IS
  'Operator-tunable knobs read by mailroom''s functions. Change with mailroom.set_setting().';

INSERT INTO mailroom.settings (key, value, description) VALUES
  ('retry_backoff_base', '30 seconds', 'First retry delay; doubles with each attempt (with jitter).'),
  ('retry_backoff_max',  '1 hour',     'Longest retry delay.'),
  ('max_body_bytes',     '1048576',    'Largest body_text or body_html accepted by enqueue, in bytes.');

CREATE FUNCTION mailroom._setting(p_key text)
RETURNS text
LANGUAGE sql STABLE
SET search_path = mailroom, pg_temp
AS $$
  SELECT value FROM mailroom.settings WHERE key = p_key
$$;
ALTER FUNCTION mailroom._setting(text) OWNER TO mailroom_owner;
REVOKE ALL ON FUNCTION mailroom._setting(text) FROM PUBLIC;
COMMENT ON FUNCTION mailroom._setting(text) IS
  'Internal: the value of one setting, NULL when unknown.';

CREATE FUNCTION mailroom.set_setting(p_key text, p_value text)
RETURNS void
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = mailroom, pg_temp
AS $$
BEGIN
  UPDATE mailroom.settings SET value = p_value WHERE key = p_key;
  IF NOT FOUND THEN
    RAISE EXCEPTION 'mailroom: key: no setting named "%"', p_key
      USING ERRCODE = '22023', HINT = 'SELECT key FROM mailroom.settings lists them.';
  END IF;
END
$$;
ALTER FUNCTION mailroom.set_setting(text, text) OWNER TO mailroom_owner;
REVOKE ALL ON FUNCTION mailroom.set_setting(text, text) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION mailroom.set_setting(text, text) TO mailroom_operator;
COMMENT ON FUNCTION mailroom.set_setting(text, text) IS
  'Change one existing setting (operators).';

COMMIT;
