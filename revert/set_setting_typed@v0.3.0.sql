-- Revert mailroom:set_setting_typed from pg: the v0.1.0 set_setting (of table_settings) back.

BEGIN;

CREATE OR REPLACE FUNCTION mailroom.set_setting(p_key text, p_value text)
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

DROP FUNCTION mailroom._check_setting(text, text);

COMMIT;
