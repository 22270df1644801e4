-- Deploy mailroom:table_domain_limits to pg
-- requires: table_senders

BEGIN;

CREATE TABLE mailroom.domain_limits (
  domain         text NOT NULL,
  max_per_second integer,
  max_per_minute integer,
  updated_at     timestamptz NOT NULL DEFAULT now(),
  CONSTRAINT domain_limits_pkey PRIMARY KEY (domain),
  CONSTRAINT domain_limits_domain_format
    CHECK (domain = '*' OR (domain = lower(domain) AND length(domain) BETWEEN 1 AND 253
                            AND position('@' IN domain) = 0 AND position('/' IN domain) = 0)),
  CONSTRAINT domain_limits_max_per_second_range CHECK (max_per_second BETWEEN 1 AND 1000000),
  CONSTRAINT domain_limits_max_per_minute_range CHECK (max_per_minute BETWEEN 1 AND 60000000)
);
ALTER TABLE mailroom.domain_limits OWNER TO mailroom_owner;

-- The default row: every domain without a row of its own gets these limits,
-- each domain its own budget. NULL, NULL = no default limit.
INSERT INTO mailroom.domain_limits (domain, max_per_second, max_per_minute) VALUES ('*', NULL, NULL);

COMMENT ON TABLE mailroom.domain_limits IS
  'Send rates per recipient domain (messages.to_domain), over all senders and runners: claim_batch skips mail to a domain at its limit and takes other mail instead. The row ''*'' is the default for every domain without a row (each domain counted on its own).';
COMMENT ON COLUMN mailroom.domain_limits.domain IS
  'Lower-case recipient domain (as messages.to_domain), or ''*'' for the default.';
COMMENT ON COLUMN mailroom.domain_limits.max_per_second IS
  'At most this many claims for the domain in any span of one second; NULL = no per-second limit.';
COMMENT ON COLUMN mailroom.domain_limits.max_per_minute IS
  'At most this many claims for the domain in any span of one minute; NULL = no per-minute limit.';

CREATE FUNCTION mailroom.set_domain_limits(
  p_domain         text,
  p_max_per_second integer DEFAULT NULL,
  p_max_per_minute integer DEFAULT NULL
) RETURNS void
LANGUAGE plpgsql
VOLATILE
SECURITY DEFINER
SET search_path = mailroom, pg_temp
AS $$
DECLARE
  v_domain text := lower(p_domain);
BEGIN
  IF v_domain IS NULL OR (v_domain <> '*' AND (length(v_domain) NOT BETWEEN 1 AND 253
                          OR position('@' IN v_domain) > 0 OR position('/' IN v_domain) > 0)) THEN
    RAISE EXCEPTION 'mailroom: domain: must be a domain name or ''*'' (the default), got %', coalesce(p_domain, 'NULL')
      USING ERRCODE = '22023';
  END IF;
  PERFORM mailroom._check_send_rate(p_max_per_second, p_max_per_minute);

  INSERT INTO mailroom.domain_limits AS d (domain, max_per_second, max_per_minute, updated_at)
  VALUES (v_domain, p_max_per_second, p_max_per_minute, now())
  ON CONFLICT (domain) DO UPDATE
     SET max_per_second = EXCLUDED.max_per_second,
         max_per_minute = EXCLUDED.max_per_minute,
         updated_at = EXCLUDED.updated_at;
END
$$;
ALTER FUNCTION mailroom.set_domain_limits(text, integer, integer) OWNER TO mailroom_owner;
REVOKE ALL ON FUNCTION mailroom.set_domain_limits(text, integer, integer) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION mailroom.set_domain_limits(text, integer, integer) TO mailroom_operator;
COMMENT ON FUNCTION mailroom.set_domain_limits(text, integer, integer) IS
  'Set the send rate to one recipient domain, or the default for all others with p_domain = ''*'' (operators). For a domain, both NULL = explicitly unlimited, whatever the default; delete_domain_limits returns it to the default.';

CREATE FUNCTION mailroom.delete_domain_limits(p_domain text) RETURNS boolean
LANGUAGE plpgsql
VOLATILE
SECURITY DEFINER
SET search_path = mailroom, pg_temp
AS $$
BEGIN
  IF p_domain IS NULL OR p_domain = '*' THEN
    RAISE EXCEPTION 'mailroom: domain: the default row ''*'' stays; set it to NULL, NULL for no default limit'
      USING ERRCODE = '22023';
  END IF;
  DELETE FROM mailroom.domain_limits WHERE domain = lower(p_domain);
  RETURN FOUND;
END
$$;
ALTER FUNCTION mailroom.delete_domain_limits(text) OWNER TO mailroom_owner;
REVOKE ALL ON FUNCTION mailroom.delete_domain_limits(text) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION mailroom.delete_domain_limits(text) TO mailroom_operator;
COMMENT ON FUNCTION mailroom.delete_domain_limits(text) IS
  'Remove a domain''s own limits, so the default row applies to it again (operators). True if it had a row.';

COMMIT;
