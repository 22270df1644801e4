-- Deploy mailroom:unsubscribe to pg
-- requires: streams
-- requires: suppress
-- requires: unsubscribe@v0.4.0

-- The one thing the one-click unsubscribe service (runner/mailroom/
-- unsubscribe_app.py) may do: suppress an address for one stream, with
-- reason unsubscribed. Its login is granted mailroom_unsubscribe, which may
-- execute this function and nothing else: no table, no view, no other
-- function. Granting it suppress instead would let a compromised or
-- misconfigured service suppress any address for all streams with any
-- reason (cutting off password resets) and lift nothing, but still more
-- than it needs; this function can never make an all-streams suppression,
-- never removes one, and tells nothing about the address (it returns
-- nothing, so the service cannot become an oracle of who is subscribed).
-- The token's signature is checked in the service (the keys never enter the
-- database); p_message_id only goes into the source for the audit trail.
--
-- Only streams whose mail carries unsubscribe headers can be named: mail of
-- the others (transactional: password resets, receipts) offers no one-click
-- link, so a request naming one is a forged or stale token, and honouring
-- it would let the service stop mail the reader never chose to receive.
-- The refusal is 22023 like every other bad argument (the service answers
-- it as an invalid link); it tells nothing about the address.

BEGIN;

DO $$
BEGIN
  IF NOT EXISTS (SELECT FROM pg_catalog.pg_roles WHERE rolname = 'mailroom_unsubscribe') THEN
    CREATE ROLE mailroom_unsubscribe NOLOGIN;
  END IF;
END
$$;
COMMENT ON ROLE mailroom_unsubscribe IS
  'The one-click unsubscribe service: may only execute mailroom.unsubscribe (an unsubscribed suppression for one stream).';
GRANT USAGE ON SCHEMA mailroom TO mailroom_unsubscribe;

CREATE OR REPLACE FUNCTION mailroom.unsubscribe(
  p_address    text,
  p_stream     text,
  p_message_id bigint,
  p_source     text DEFAULT 'one-click'
)
RETURNS void
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = mailroom, pg_temp
AS $$
BEGIN
  PERFORM mailroom._check_address('address', p_address);
  PERFORM mailroom._check_stream(p_stream);
  IF NOT (SELECT s.unsubscribe_headers FROM mailroom.streams s WHERE s.name = p_stream) THEN
    RAISE EXCEPTION 'mailroom: stream: % carries no unsubscribe headers; only its operator can suppress for it', p_stream
      USING ERRCODE = '22023';
  END IF;
  IF p_message_id IS NOT NULL AND p_message_id < 1 THEN
    RAISE EXCEPTION 'mailroom: message_id: must be a positive message id or NULL' USING ERRCODE = '22023';
  END IF;
  IF p_source IS NULL OR p_source !~ '^[a-z0-9_.:-]{1,40}$' THEN
    RAISE EXCEPTION 'mailroom: source: 1 to 40 characters of a-z, 0-9 and _ . : -' USING ERRCODE = '22023';
  END IF;
  -- The first reason per scope stays, as in suppress; a repeat changes nothing.
  INSERT INTO mailroom.suppressions (address_key, address, reason, source, stream, created_at)
  VALUES (mailroom._address_key(p_address), p_address, 'unsubscribed',
          p_source || CASE WHEN p_message_id IS NOT NULL THEN ' message ' || p_message_id ELSE '' END,
          p_stream, now())
  ON CONFLICT (address_key, stream) DO NOTHING;
END
$$;
ALTER FUNCTION mailroom.unsubscribe(text, text, bigint, text) OWNER TO mailroom_owner;
REVOKE ALL ON FUNCTION mailroom.unsubscribe(text, text, bigint, text) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION mailroom.unsubscribe(text, text, bigint, text) TO mailroom_unsubscribe;
COMMENT ON FUNCTION mailroom.unsubscribe(text, text, bigint, text) IS
  'Unsubscribe service: suppress p_address for stream p_stream only, a stream whose mail carries unsubscribe headers (SQLSTATE 22023 for any other; reason unsubscribed, source p_source plus the message id), idempotently; returns nothing whether or not the address was known or already unsubscribed. Executable by mailroom_unsubscribe alone.';

COMMIT;
