-- Deploy mailroom:suppress to pg
-- requires: suppress@v0.3.0
-- requires: split_messages
-- requires: streams

-- v0.4: the suppression row is what counts. claim_batch's gate looks every
-- mail it is about to hand out up in mailroom.suppressions (by
-- _address_key(contents.to_address)) and finishes a suppressed one as
-- cancelled (reason suppressed), so mail that was in flight when the address
-- was suppressed, came back by a retry, a reclaim or a release, or was
-- enqueued by a transaction that committed after this one (issue 13, hole 1)
-- is never handed out.
--
-- suppress no longer cancels the address's live mail itself. v0.3 did it
-- through an index on messages by address over queued and paused rows; v0.4
-- has no index by address (every enqueue and every campaign row would pay
-- for it, and the gate is what counts), so finding that mail means joining
-- every live queue row to its contents: about a second per call with a
-- million-mail campaign in the queue, which is exactly when unsubscribes
-- come in. The gate cancels it when it comes due instead, at the cost of one
-- probe of the suppressions primary key per claimed mail that it pays anyway.
-- The return value stays an integer for callers of v0.3: the mail cancelled
-- by this call, now always 0. No p_now (the database's clock).

-- Streams (issue 15): a suppression holds for one stream (p_stream) or for
-- all of them (p_stream NULL, the default: bounces and operator decisions).
-- unsuppress lifts one scope, or every scope when p_stream is NULL.

BEGIN;

DROP FUNCTION mailroom.suppress(text, text, text, timestamptz);
DROP FUNCTION mailroom.unsuppress(text);

CREATE FUNCTION mailroom.suppress(
  p_address text,
  p_reason  text DEFAULT 'manual',
  p_source  text DEFAULT NULL,
  p_stream  text DEFAULT NULL
)
RETURNS integer
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = mailroom, pg_temp
AS $$
DECLARE
  v_key text;
BEGIN
  PERFORM mailroom._check_address('address', p_address);
  IF p_reason IS NULL OR p_reason NOT IN ('unsubscribed', 'hard_bounce', 'complaint', 'manual') THEN
    RAISE EXCEPTION 'mailroom: reason: must be unsubscribed, hard_bounce, complaint or manual, got %', coalesce(p_reason, 'NULL')
      USING ERRCODE = '22023';
  END IF;
  IF length(p_source) > 200 OR p_source ~ '[[:cntrl:]]' THEN
    RAISE EXCEPTION 'mailroom: source: at most 200 characters without control characters' USING ERRCODE = '22023';
  END IF;
  IF p_stream IS NOT NULL THEN
    PERFORM mailroom._check_stream(p_stream);
  END IF;
  v_key := mailroom._address_key(p_address);
  -- The first reason per scope stays (an unsubscribe is not overwritten by a later bounce).
  INSERT INTO mailroom.suppressions (address_key, address, reason, source, stream, created_at)
  VALUES (v_key, p_address, p_reason, p_source, p_stream, now())
  ON CONFLICT (address_key, stream) DO NOTHING;
  RETURN 0;   -- see the header: the gate cancels the address's live mail
END
$$;
ALTER FUNCTION mailroom.suppress(text, text, text, text) OWNER TO mailroom_owner;
REVOKE ALL ON FUNCTION mailroom.suppress(text, text, text, text) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION mailroom.suppress(text, text, text, text) TO mailroom_app, mailroom_operator;
COMMENT ON FUNCTION mailroom.suppress(text, text, text, text) IS
  'Stop mail to p_address (reason unsubscribed, hard_bounce, complaint or manual; domain compared case-insensitively) for the stream p_stream, or for all streams when p_stream is NULL (the default): no claim that starts after this commits hands out such mail (claim_batch cancels it with reason suppressed when it comes due; enqueue records new mail to it as cancelled). Idempotent per scope; the first reason stays. Returns 0 (since v0.4; kept for v0.3 callers).';

CREATE FUNCTION mailroom.unsuppress(p_address text, p_stream text DEFAULT NULL)
RETURNS boolean
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = mailroom, pg_temp
AS $$
BEGIN
  PERFORM mailroom._check_address('address', p_address);
  IF p_stream IS NOT NULL THEN
    PERFORM mailroom._check_stream(p_stream);
  END IF;
  DELETE FROM mailroom.suppressions
  WHERE address_key = mailroom._address_key(p_address) AND (p_stream IS NULL OR stream = p_stream);
  RETURN FOUND;
END
$$;
ALTER FUNCTION mailroom.unsuppress(text, text) OWNER TO mailroom_owner;
REVOKE ALL ON FUNCTION mailroom.unsuppress(text, text) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION mailroom.unsuppress(text, text) TO mailroom_app, mailroom_operator;
COMMENT ON FUNCTION mailroom.unsuppress(text, text) IS
  'Allow mail to p_address again: lift the suppression for stream p_stream only (an all-streams suppression stays), or every suppression of the address when p_stream is NULL. Mail cancelled meanwhile stays cancelled. Returns false when nothing was lifted.';

COMMIT;
