-- Deploy mailroom:inspect to pg
-- requires: inspect@v0.2.0

-- The ledger row of an attempt in flight is written when its lease ends, so
-- inspect adds the attempt in flight from the lease on the message (id NULL,
-- outcome NULL), as the ledger row claim_batch opened used to show it.

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
                  FROM mailroom.attempts a WHERE a.message_id = m.id), '[]'::jsonb)
                  -- The attempt in flight, from the lease on the message: its
                  -- ledger row is written when the lease ends.
                  || CASE WHEN m.status = 'sending' AND NOT EXISTS (
                            SELECT FROM mailroom.attempts a
                            WHERE a.message_id = m.id AND a.lease_token = m.lease_token)
                     THEN jsonb_build_array(jsonb_build_object(
                            'id', NULL, 'attempt', m.attempts, 'worker', m.worker, 'lease_token', m.lease_token,
                            'claimed_at', m.claimed_at, 'finished_at', NULL, 'reported_at', NULL,
                            'reported', NULL, 'outcome', NULL, 'smtp_code', NULL, 'smtp_enhanced', NULL,
                            'smtp_text', NULL, 'provider_id', NULL, 'duplicate', false))
                     ELSE '[]'::jsonb END)
    FROM mailroom.messages m
    WHERE m.id = v_id
  );
END
$$;
COMMENT ON FUNCTION mailroom.inspect(text) IS
  'Operator: one message (by delivery key, else by numeric id) as JSON without its bodies (their sizes instead), with successful_sends and its ledger rows in order under "ledger", ending with the attempt in flight (id and outcome NULL) while the message is leased. NULL when there is no such message.';

COMMIT;
