-- Deploy mailroom:inspect to pg
-- requires: inspect@v0.3.0
-- requires: split_messages

-- v0.4: the mail is found by delivery key (contents_delivery_key_unique) or
-- id in contents and read through the read model mailroom.messages (one row:
-- contents, its queue row or its finishing ledger row), so the keys of v0.3
-- stay and finished_at is added; "finished" is the finishing ledger row
-- itself (NULL while the mail is live). The attempt in flight is simply the
-- queue row's lease while its status is sending (v0.3 also looked for a
-- ledger row a claim before v0.3.0 had opened; split_messages removed those).
-- Streams (issue 15): the mail's stream is one of its keys, and
-- "suppressions" lists the address's suppressions with their scope (stream
-- NULL: all streams), so an operator sees why the gate would stop it.

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
  SELECT c.id INTO v_id FROM mailroom.contents c WHERE c.delivery_key = p_ref;
  IF v_id IS NULL AND p_ref ~ '^[0-9]{1,18}$' THEN
    SELECT c.id INTO v_id FROM mailroom.contents c WHERE c.id = p_ref::bigint;
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
                'finished', (SELECT to_jsonb(f) - 'message_id' FROM mailroom.attempts f
                             WHERE f.message_id = m.id AND f.finished_as IS NOT NULL),
                'suppressions', coalesce((
                  SELECT jsonb_agg(jsonb_build_object('stream', s.stream, 'reason', s.reason, 'source', s.source,
                                                      'created_at', s.created_at,
                                                      'stops_this_mail', s.stream IS NULL OR s.stream = m.stream)
                                   ORDER BY s.stream NULLS FIRST)
                  FROM mailroom.suppressions s WHERE s.address_key = mailroom._address_key(m.to_address)), '[]'::jsonb),
                'ledger', coalesce((
                  SELECT jsonb_agg(to_jsonb(a) - 'message_id' ORDER BY a.id)
                  FROM mailroom.attempts a WHERE a.message_id = m.id), '[]'::jsonb)
                  -- The attempt in flight, from the lease on the queue row:
                  -- its ledger row is written when the lease ends.
                  || CASE WHEN m.status = 'sending'
                     THEN jsonb_build_array(jsonb_build_object(
                            'id', NULL, 'attempt', m.attempts, 'worker', m.worker, 'lease_token', m.lease_token,
                            'claimed_at', m.claimed_at, 'finished_at', NULL, 'reported_at', NULL,
                            'reported', NULL, 'outcome', NULL, 'smtp_code', NULL, 'smtp_enhanced', NULL,
                            'smtp_text', NULL, 'provider_id', NULL, 'duplicate', false,
                            'finished_as', NULL, 'status_reason', NULL, 'last_error', NULL))
                     ELSE '[]'::jsonb END)
    FROM mailroom.messages m
    WHERE m.id = v_id
  );
END
$$;
ALTER FUNCTION mailroom.inspect(text) OWNER TO mailroom_owner;
REVOKE ALL ON FUNCTION mailroom.inspect(text) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION mailroom.inspect(text) TO mailroom_operator;
COMMENT ON FUNCTION mailroom.inspect(text) IS
  'Operator: one mail (by delivery key, else by numeric id) as JSON without its bodies (their sizes instead): its content and stream, the address''s suppressions with their scope (stops_this_mail: for all streams or for its stream), its live state or how it finished (finished_at, and "finished": the finishing ledger row, NULL while live), successful_sends, and its ledger rows in order under "ledger", ending with the attempt in flight (id and outcome NULL) while it is leased. NULL when there is no such mail (never enqueued, or pruned).';

COMMIT;
