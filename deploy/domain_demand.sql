-- Deploy mailroom:domain_demand to pg
-- requires: table_domain_limits
-- requires: split_messages
-- requires: address_wire_form

-- What a fleet directory reads from each shard to share out a fleet-wide
-- domain limit (fleet/deploy/domain_limits.sql): per domain, how much mail
-- waits here (queued and due now or within the next minute, the span until
-- the next rebalance) and the limits this shard enforces now. Domains are
-- keys as contents.to_domain holds them (lower case, A-labels); the
-- directory computes that key before it asks.
--
-- Cost: one pass over the queued mail due within a minute (queue_claim_idx
-- order) joined to its contents; the directory asks once a minute.

BEGIN;

CREATE FUNCTION mailroom.domain_demand(p_domains text[])
RETURNS TABLE (domain text, due bigint, max_per_second integer, max_per_minute integer)
LANGUAGE plpgsql
STABLE
SECURITY DEFINER
SET search_path = mailroom, pg_temp
AS $$
#variable_conflict use_column
BEGIN
  IF p_domains IS NULL OR cardinality(p_domains) > 1000 OR array_position(p_domains, NULL) IS NOT NULL THEN
    RAISE EXCEPTION 'mailroom: domains: must be an array of at most 1000 domain names without NULL, got %',
      coalesce(cardinality(p_domains)::text || ' elements', 'NULL')
      USING ERRCODE = '22023';
  END IF;
  RETURN QUERY
  SELECT d.domain, coalesce(n.due, 0)::bigint, l.max_per_second, l.max_per_minute
  FROM (SELECT DISTINCT pg_catalog.lower(x) AS domain FROM unnest(p_domains) AS x) AS d
  LEFT JOIN (SELECT c.to_domain, count(*) AS due
             FROM mailroom.queue q JOIN mailroom.contents c ON c.id = q.id
             WHERE q.status = 'queued' AND q.run_at <= now() + interval '1 minute'
               AND c.to_domain = ANY (SELECT pg_catalog.lower(x) FROM unnest(p_domains) AS x)
             GROUP BY c.to_domain) AS n ON n.to_domain = d.domain
  LEFT JOIN mailroom.domain_limits l ON l.domain = d.domain
  ORDER BY d.domain;
END
$$;
ALTER FUNCTION mailroom.domain_demand(text[]) OWNER TO mailroom_owner;
REVOKE ALL ON FUNCTION mailroom.domain_demand(text[]) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION mailroom.domain_demand(text[]) TO mailroom_operator;
COMMENT ON FUNCTION mailroom.domain_demand(text[]) IS
  'For each of p_domains (recipient domains as contents.to_domain: lower case, A-labels; at most 1000): the mail queued to it here that is due now or within a minute, and this database''s own limits for it (NULL: no row of its own). Read by a fleet directory to share a fleet-wide domain limit out among shards (docs/fleet.md).';

COMMIT;
