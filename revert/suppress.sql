-- Revert mailroom:suppress from pg
-- Back to v0.3.0: suppress with p_now, cancelling rows of the messages table
-- (restored by split_messages' revert later in the revert).

BEGIN;

DROP FUNCTION mailroom.suppress(text, text, text, text);
DROP FUNCTION mailroom.unsuppress(text, text);

CREATE FUNCTION mailroom.suppress(
  p_address text,
  p_reason  text        DEFAULT 'manual',
  p_source  text        DEFAULT NULL,
  p_now     timestamptz DEFAULT now()
)
RETURNS integer
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = mailroom, pg_temp
AS $$
DECLARE
  v_key   text;
  v_count integer;
BEGIN
  PERFORM mailroom._check_address('address', p_address);
  IF p_reason IS NULL OR p_reason NOT IN ('unsubscribed', 'hard_bounce', 'complaint', 'manual') THEN
    RAISE EXCEPTION 'mailroom: reason: must be unsubscribed, hard_bounce, complaint or manual, got %', coalesce(p_reason, 'NULL')
      USING ERRCODE = '22023';
  END IF;
  IF length(p_source) > 200 OR p_source ~ '[[:cntrl:]]' THEN
    RAISE EXCEPTION 'mailroom: source: at most 200 characters without control characters' USING ERRCODE = '22023';
  END IF;
  v_key := mailroom._address_key(p_address);
  -- The first reason stays (an unsubscribe is not overwritten by a later bounce).
  INSERT INTO mailroom.suppressions (address_key, address, reason, source, created_at)
  VALUES (v_key, p_address, p_reason, p_source, p_now)
  ON CONFLICT (address_key) DO NOTHING;
  -- Mail not yet handed to a runner is cancelled (the partial index on
  -- _address_key(to_address) covers exactly queued and paused rows).
  UPDATE mailroom.messages
  SET status = 'cancelled', status_reason = 'suppressed', updated_at = p_now
  WHERE mailroom._address_key(to_address) = v_key AND status IN ('queued', 'paused');
  GET DIAGNOSTICS v_count = ROW_COUNT;
  RETURN v_count;
END
$$;
ALTER FUNCTION mailroom.suppress(text, text, text, timestamptz) OWNER TO mailroom_owner;
REVOKE ALL ON FUNCTION mailroom.suppress(text, text, text, timestamptz) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION mailroom.suppress(text, text, text, timestamptz) TO mailroom_app, mailroom_operator;
COMMENT ON FUNCTION mailroom.suppress(text, text, text, timestamptz) IS
  'Never mail p_address again (reason unsubscribed, hard_bounce, complaint or manual; domain compared case-insensitively): its queued and paused mail is cancelled with reason suppressed. Returns how many were cancelled.';

CREATE FUNCTION mailroom.unsuppress(p_address text)
RETURNS boolean
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = mailroom, pg_temp
AS $$
BEGIN
  PERFORM mailroom._check_address('address', p_address);
  DELETE FROM mailroom.suppressions WHERE address_key = mailroom._address_key(p_address);
  RETURN FOUND;
END
$$;
ALTER FUNCTION mailroom.unsuppress(text) OWNER TO mailroom_owner;
REVOKE ALL ON FUNCTION mailroom.unsuppress(text) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION mailroom.unsuppress(text) TO mailroom_app, mailroom_operator;
COMMENT ON FUNCTION mailroom.unsuppress(text) IS
  'Allow mail to p_address again (mail cancelled while it was suppressed stays cancelled). Returns false when it was not suppressed.';

COMMIT;
