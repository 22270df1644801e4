-- Deploy mailroom:feedback_message_id_matches to pg
-- requires: split_messages
-- requires: role_feedback

-- The runner's Message-ID is <first 40 hex digits of sha256(delivery key)@
-- domain> (runner/mailroom/render.py). A DSN or ARF report that names its
-- mail by VERP and also quotes the original Message-ID must quote that mail's
-- one: this is the check, by primary key. It cannot find a mail by
-- Message-ID alone: that would need an index of those digests, which every
-- enqueue and campaign row would pay for, for mail that VERP names anyway.

BEGIN;

CREATE FUNCTION mailroom.feedback_message_id_matches(p_message_id bigint, p_header text)
RETURNS boolean
LANGUAGE sql STABLE
SECURITY DEFINER
SET search_path = mailroom, pg_temp
AS $$
  SELECT pg_catalog.substr(pg_catalog.encode(pg_catalog.sha256(pg_catalog.convert_to(c.delivery_key, 'UTF8')), 'hex'), 1, 40)
         = pg_catalog.lower(pg_catalog.split_part(pg_catalog.btrim(p_header, '<> '), '@', 1))
  FROM mailroom.contents c
  WHERE c.id = p_message_id
$$;
ALTER FUNCTION mailroom.feedback_message_id_matches(bigint, text) OWNER TO mailroom_owner;
REVOKE ALL ON FUNCTION mailroom.feedback_message_id_matches(bigint, text) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION mailroom.feedback_message_id_matches(bigint, text) TO mailroom_feedback;
COMMENT ON FUNCTION mailroom.feedback_message_id_matches(bigint, text) IS
  'Whether p_header (a Message-ID quoted by a DSN or ARF report) is the one the runner gave mail p_message_id (derived from its delivery key; the domain is not compared). NULL when there is no such mail.';

COMMIT;
