-- Deploy mailroom:streams to pg
-- requires: roles
-- requires: table_suppressions
-- requires: table_schedules
-- requires: table_campaigns

-- Message streams (issue 15): every mail belongs to one, and a suppression
-- holds for one stream or for all of them. A user who unsubscribes from the
-- newsletter (broadcast) must still get their password reset
-- (transactional); a hard bounce or an operator's decision stops everything.
-- mailroom.contents.stream (table_contents) names each mail's stream; the
-- claim-time gate (claim_batch) cancels mail whose address is suppressed for
-- all streams or for that mail's stream.
--
-- Every suppression that exists when this is deployed keeps holding for all
-- streams: the new column is NULL on every existing row.

BEGIN;

CREATE TABLE mailroom.streams (
  name                text PRIMARY KEY,
  unsubscribe_headers boolean NOT NULL,
  description         text,
  CONSTRAINT streams_name_valid CHECK (name ~ '^[a-z][a-z0-9_-]{0,39}$')
);
ALTER TABLE mailroom.streams OWNER TO mailroom_owner;
REVOKE ALL ON mailroom.streams FROM PUBLIC;
COMMENT ON TABLE mailroom.streams IS
  'Message streams: every mail belongs to one (mailroom.contents.stream), suppressions hold for one or for all (mailroom.suppressions.stream). Operators add streams with mailroom.define_stream.';
COMMENT ON COLUMN mailroom.streams.unsubscribe_headers IS
  'Mail of this stream carries List-Unsubscribe and List-Unsubscribe-Post (RFC 8058), added by the runner.';
INSERT INTO mailroom.streams (name, unsubscribe_headers, description) VALUES
  ('transactional', false, 'Mail a user asked for or needs (password resets, receipts); the default of enqueue.'),
  ('broadcast', true, 'Bulk mail (campaigns, newsletters, digests); the default of enqueue_campaign and schedules.');

-- NULL: every stream. At most one row per address and scope: NULLS NOT
-- DISTINCT makes the all-streams row unique too. The gate probes this index
-- by address_key and reads the (few) scopes of that address: one probe.
ALTER TABLE mailroom.suppressions
  ADD COLUMN stream text REFERENCES mailroom.streams (name),
  DROP CONSTRAINT suppressions_pkey,
  ADD CONSTRAINT suppressions_address_stream_unique UNIQUE NULLS NOT DISTINCT (address_key, stream);
COMMENT ON COLUMN mailroom.suppressions.stream IS
  'The stream the suppression holds for; NULL = all streams (hard bounces, complaints by default, operator decisions, every suppression older than streams).';
COMMENT ON TABLE mailroom.suppressions IS
  'Addresses not to mail, for one stream or for all (stream NULL). claim_batch cancels mail to them (reason suppressed); enqueue records new mail to them as cancelled; a 5.1.x bounce adds an all-streams row.';

ALTER TABLE mailroom.campaigns
  ADD COLUMN stream text NOT NULL DEFAULT 'broadcast' REFERENCES mailroom.streams (name);
COMMENT ON COLUMN mailroom.campaigns.stream IS
  'Stream of all the campaign''s mail (enqueue_campaign''s p_stream, default broadcast).';

ALTER TABLE mailroom.schedules
  ADD COLUMN stream text NOT NULL DEFAULT 'broadcast' REFERENCES mailroom.streams (name);
COMMENT ON COLUMN mailroom.schedules.stream IS
  'Stream of the mail the schedule materializes (default broadcast).';

CREATE FUNCTION mailroom.define_stream(
  p_name                text,
  p_unsubscribe_headers boolean,
  p_description         text DEFAULT NULL
)
RETURNS boolean
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = mailroom, pg_temp
AS $$
BEGIN
  IF p_name IS NULL OR p_name !~ '^[a-z][a-z0-9_-]{0,39}$' THEN
    RAISE EXCEPTION 'mailroom: name: "%" is not a stream name (a lower-case letter, then letters, digits, _ or -, at most 40)', p_name
      USING ERRCODE = '22023';
  END IF;
  IF p_unsubscribe_headers IS NULL THEN
    RAISE EXCEPTION 'mailroom: unsubscribe_headers: must be true or false' USING ERRCODE = '22023';
  END IF;
  IF length(p_description) > 500 OR p_description ~ '[[:cntrl:]]' THEN
    RAISE EXCEPTION 'mailroom: description: at most 500 characters without control characters' USING ERRCODE = '22023';
  END IF;
  INSERT INTO mailroom.streams AS s (name, unsubscribe_headers, description)
  VALUES (p_name, p_unsubscribe_headers, p_description)
  ON CONFLICT (name) DO UPDATE SET unsubscribe_headers = excluded.unsubscribe_headers,
                                   description = coalesce(excluded.description, s.description);
  RETURN true;
END
$$;
ALTER FUNCTION mailroom.define_stream(text, boolean, text) OWNER TO mailroom_owner;
REVOKE ALL ON FUNCTION mailroom.define_stream(text, boolean, text) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION mailroom.define_stream(text, boolean, text) TO mailroom_operator;
COMMENT ON FUNCTION mailroom.define_stream(text, boolean, text) IS
  'Operator: add a stream, or change whether its mail carries unsubscribe headers (and its description). Streams are never removed: mail and suppressions name them.';

-- Operators' view of the streams: what each carries and how many addresses
-- are suppressed for it alone (stream NULL: for all streams).
CREATE VIEW mailroom.stream_overview WITH (security_barrier) AS
SELECT st.name AS stream, st.unsubscribe_headers, st.description,
       (SELECT count(*) FROM mailroom.suppressions s WHERE s.stream = st.name) AS suppressed
FROM mailroom.streams st
UNION ALL
SELECT NULL, NULL, 'every stream', (SELECT count(*) FROM mailroom.suppressions s WHERE s.stream IS NULL);
ALTER VIEW mailroom.stream_overview OWNER TO mailroom_owner;
REVOKE ALL ON mailroom.stream_overview FROM PUBLIC;
GRANT SELECT ON mailroom.stream_overview TO mailroom_operator;
COMMENT ON VIEW mailroom.stream_overview IS
  'Operator: each stream, whether its mail carries unsubscribe headers, and how many addresses are suppressed for it alone; the row with stream NULL counts the all-streams suppressions.';

-- What runners need to know of the streams: which carry unsubscribe
-- headers. Read at start and again every minute, not per claim.
CREATE FUNCTION mailroom.stream_settings()
RETURNS TABLE (name text, unsubscribe_headers boolean)
LANGUAGE sql
STABLE
SECURITY DEFINER
SET search_path = mailroom, pg_temp
AS $$
  SELECT s.name, s.unsubscribe_headers FROM mailroom.streams s ORDER BY s.name
$$;
ALTER FUNCTION mailroom.stream_settings() OWNER TO mailroom_owner;
REVOKE ALL ON FUNCTION mailroom.stream_settings() FROM PUBLIC;
GRANT EXECUTE ON FUNCTION mailroom.stream_settings() TO mailroom_runner, mailroom_operator;
COMMENT ON FUNCTION mailroom.stream_settings() IS
  'Runners and operators: each stream and whether its mail carries List-Unsubscribe and List-Unsubscribe-Post.';

-- Internal: the stream name check every writer of contents.stream makes
-- (contents has no foreign key: it would cost every bulk insert a probe).
CREATE FUNCTION mailroom._check_stream(p_stream text)
RETURNS void
LANGUAGE plpgsql
STABLE
SECURITY DEFINER
SET search_path = mailroom, pg_temp
AS $$
BEGIN
  IF p_stream IS NULL OR NOT EXISTS (SELECT FROM mailroom.streams s WHERE s.name = p_stream) THEN
    RAISE EXCEPTION 'mailroom: stream: no stream named "%"', coalesce(p_stream, 'NULL')
      USING ERRCODE = '22023', HINT = 'Streams are listed in mailroom.streams; operators add them with mailroom.define_stream().';
  END IF;
END
$$;
ALTER FUNCTION mailroom._check_stream(text) OWNER TO mailroom_owner;
REVOKE ALL ON FUNCTION mailroom._check_stream(text) FROM PUBLIC;
COMMENT ON FUNCTION mailroom._check_stream(text) IS
  'Internal: raise 22023 unless p_stream names a row of mailroom.streams.';

COMMIT;
