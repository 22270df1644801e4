-- Deploy mailroom:message_lookup to pg
-- requires: table_contents
-- requires: role_feedback
-- requires: feedback_message_id_matches

-- Providers report a mail by its Message-ID (SES mail.commonHeaders, the
-- headers Mailgun and SendGrid echo back), and a DSN quotes it too. The
-- runner's Message-ID is <DIGEST.ID@domain> (runner/mailroom/render.py):
-- the id finds the row by primary key and the digest (40 hex digits of
-- sha256 of its delivery key) confirms it, so a made-up id finds nothing and
-- no index of digests is needed (one cost 20 % of enqueue_campaign's time,
-- paid by every mail for the few that feedback names). A Message-ID without
-- the id, as a v0.3 runner wrote it, cannot be found this way: NULL (a
-- bounce's VERP address still names its mail).

BEGIN;

CREATE FUNCTION mailroom.message_by_message_id(p_message_id text)
RETURNS bigint
LANGUAGE plpgsql STABLE
SECURITY DEFINER
SET search_path = mailroom, pg_temp
AS $$
DECLARE
  v_id numeric;
BEGIN
  IF length(p_message_id) > 1000 THEN
    RAISE EXCEPTION 'mailroom: message_id: at most 1000 characters, got %', length(p_message_id) USING ERRCODE = '22023';
  END IF;
  SELECT quoted.mail_id INTO v_id FROM mailroom._message_id_parts(p_message_id) AS quoted;
  IF v_id IS NULL OR v_id > 9223372036854775807 THEN
    RETURN NULL;   -- not a Message-ID a v0.4 runner wrote
  END IF;
  IF mailroom.feedback_message_id_matches(v_id::bigint, p_message_id) THEN
    RETURN v_id;
  END IF;
  RETURN NULL;     -- no such mail (pruned), or the digest is not that mail's
END
$$;
ALTER FUNCTION mailroom.message_by_message_id(text) OWNER TO mailroom_owner;
REVOKE ALL ON FUNCTION mailroom.message_by_message_id(text) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION mailroom.message_by_message_id(text) TO mailroom_feedback, mailroom_operator;
COMMENT ON FUNCTION mailroom.message_by_message_id(text) IS
  'The id of the mail a Message-ID written by a mailroom runner names (<digest.id@domain>, brackets and domain optional), found by its id and returned only when the digest is that mail''s; NULL when it is not one, the mail is unknown (pruned), or it is the v0.3 form without the id (<digest@domain>: VERP still names a bounce''s mail). For feedback reporters and operators.';

COMMIT;
