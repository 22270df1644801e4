-- Deploy mailroom:feedback_message_id_matches to pg
-- requires: split_messages
-- requires: role_feedback

-- The runner's Message-ID is <DIGEST.ID@domain> (runner/mailroom/render.py):
-- DIGEST the first 40 hex digits of sha256(delivery key), ID the mail's id.
-- Both are stable across retries of the mail, so a receiver's dedupe sees one
-- Message-ID however often it is sent; the id lets a Message-ID be found by
-- primary key (message_by_message_id) instead of an index of digests that
-- every enqueue and campaign row would pay for. A v0.3 runner wrote <DIGEST@
-- domain>, without the id.
--
-- A DSN or ARF report that names its mail by VERP and also quotes the
-- original Message-ID must quote that mail's one: this is the check, by
-- primary key. It accepts the v0.3 form too (the VERP address named the
-- mail; the digest confirms it).

BEGIN;

-- One reading of a runner's Message-ID for both functions: brackets, case,
-- the domain and the id are optional (providers quote it bare or bracketed;
-- runners may be configured with different --message-id-domain values over
-- time). NULLs for what a mailroom runner did not write.
CREATE FUNCTION mailroom._message_id_parts(p_message_id text, OUT digest text, OUT mail_id numeric)
LANGUAGE sql IMMUTABLE
SET search_path = mailroom, pg_temp
AS $$
  SELECT m[1], m[2]::numeric
  FROM (SELECT pg_catalog.regexp_match(pg_catalog.lower(pg_catalog.btrim(p_message_id)),
                 '^<?([0-9a-f]{40})(?:\.([0-9]{1,19}))?(?:@[^<>@[:space:]]+)?>?$') AS m) AS parsed
$$;
ALTER FUNCTION mailroom._message_id_parts(text) OWNER TO mailroom_owner;
REVOKE ALL ON FUNCTION mailroom._message_id_parts(text) FROM PUBLIC;
COMMENT ON FUNCTION mailroom._message_id_parts(text) IS
  'A runner''s Message-ID read: digest (40 hex digits of sha256 of the delivery key) and mail_id (the mail''s id; NULL in the v0.3 form <digest@domain>); both NULL when mailroom did not write it. Brackets, case and the domain do not matter.';

CREATE FUNCTION mailroom.feedback_message_id_matches(p_message_id bigint, p_header text)
RETURNS boolean
LANGUAGE sql STABLE
SECURITY DEFINER
SET search_path = mailroom, pg_temp
AS $$
  SELECT coalesce(quoted.digest = pg_catalog.substr(pg_catalog.encode(pg_catalog.sha256(
                                    pg_catalog.convert_to(c.delivery_key, 'UTF8')), 'hex'), 1, 40)
                  AND (quoted.mail_id IS NULL OR quoted.mail_id = c.id), false)
  FROM mailroom.contents c, mailroom._message_id_parts(p_header) AS quoted
  WHERE c.id = p_message_id
$$;
ALTER FUNCTION mailroom.feedback_message_id_matches(bigint, text) OWNER TO mailroom_owner;
REVOKE ALL ON FUNCTION mailroom.feedback_message_id_matches(bigint, text) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION mailroom.feedback_message_id_matches(bigint, text) TO mailroom_feedback;
COMMENT ON FUNCTION mailroom.feedback_message_id_matches(bigint, text) IS
  'Whether p_header (a Message-ID quoted by a DSN or ARF report) is the one a runner gave mail p_message_id: <digest.id@domain>, or <digest@domain> as a v0.3 runner wrote it (the digest derives from the delivery key; the domain is not compared). NULL when there is no such mail.';

COMMIT;
