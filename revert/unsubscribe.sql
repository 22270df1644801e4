-- Revert mailroom:unsubscribe from pg: back to the v0.4.0 function, which
-- suppresses for any stream the token names, the transactional one included.

BEGIN;

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
  IF p_message_id IS NOT NULL AND p_message_id < 1 THEN
    RAISE EXCEPTION 'mailroom: message_id: must be a positive message id or NULL' USING ERRCODE = '22023';
  END IF;
  IF p_source IS NULL OR p_source !~ '^[a-z0-9_.:-]{1,40}$' THEN
    RAISE EXCEPTION 'mailroom: source: 1 to 40 characters of a-z, 0-9 and _ . : -' USING ERRCODE = '22023';
  END IF;
  INSERT INTO mailroom.suppressions (address_key, address, reason, source, stream, created_at)
  VALUES (mailroom._address_key(p_address), p_address, 'unsubscribed',
          p_source || CASE WHEN p_message_id IS NOT NULL THEN ' message ' || p_message_id ELSE '' END,
          p_stream, now())
  ON CONFLICT (address_key, stream) DO NOTHING;
END
$$;
COMMENT ON FUNCTION mailroom.unsubscribe(text, text, bigint, text) IS
  'Unsubscribe service: suppress p_address for stream p_stream only (reason unsubscribed, source p_source plus the message id), idempotently; returns nothing whether or not the address was known or already unsubscribed. Executable by mailroom_unsubscribe alone.';

COMMIT;
