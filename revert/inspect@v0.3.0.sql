-- Revert mailroom:inspect from pg: back to the v0.2.0 function (the ledger row opened at claim time)

BEGIN;

CREATE OR REPLACE FUNCTION mailroom.inspect(p_ref text)
RETURNS jsonb
LANGUAGE plpgsql STABLE
SECURITY DEFINER
SET search_path = mailroom, pg_temp
AS $$
DECLARE
  v_id bigint;
BEGIN
  IF p_ref IS NULL OR p_ref = '' THEN
    RAISE EXCEPTION 'mailroom: ref: a message id or delivery key is required' USING ERRCODE = '22023';
  END IF;

  -- A delivery key wins over an id: keys are what applications know.
  SELECT m.id INTO v_id FROM mailroom.messages m WHERE m.delivery_key = p_ref;
  IF v_id IS NULL AND p_ref ~ '^[0-9]{1,18}$' THEN
    SELECT m.id INTO v_id FROM mailroom.messages m WHERE m.id = p_ref::bigint;
  END IF;
  IF v_id IS NULL THEN
    RETURN NULL;
  END IF;

  RETURN (
    SELECT (to_jsonb(m) - 'body_text' - 'body_html')
           || jsonb_build_object(
                'body_text_bytes', octet_length(m.body_text),
                'body_html_bytes', octet_length(m.body_html),
                'successful_sends', (SELECT count(*) FROM mailroom.attempts a
                                     WHERE a.message_id = m.id AND a.reported = 'sent'),
                'ledger', coalesce((
                  SELECT jsonb_agg(to_jsonb(a) - 'message_id' - 'delivery_key' ORDER BY a.id)
                  FROM mailroom.attempts a WHERE a.message_id = m.id), '[]'::jsonb))
    FROM mailroom.messages m
    WHERE m.id = v_id
  );
END
$$;
ALTER FUNCTION mailroom.inspect(text) OWNER TO mailroom_owner;
REVOKE ALL ON FUNCTION mailroom.inspect(text) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION mailroom.inspect(text) TO mailroom_operator;
COMMENT ON FUNCTION mailroom.inspect(text) IS
  'Operator: one message (by delivery key, else by numeric id) as JSON without its bodies (their sizes instead), with successful_sends and its ledger rows in order under "ledger". NULL when there is no such message.';

COMMIT;
