-- Deploy mailroom_fleet:inspect to pg
-- requires: schema

-- A delivery key is unique within a shard, not across the fleet: mail
-- enqueued through mailroom_fleet.enqueue under one key and one address is
-- on one shard, but an id (or a key reused for another address) may be
-- found on several, and each is returned with its shard.

BEGIN;

CREATE FUNCTION mailroom_fleet.inspect(p_ref text)
RETURNS TABLE (shard text, mail jsonb)
LANGUAGE plproxy
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
  CLUSTER 'mailroom_fleet';
  RUN ON ALL;
  SELECT pg_catalog.current_database()::text AS shard, i.mail
  FROM mailroom.inspect(p_ref) AS i(mail)
  WHERE i.mail IS NOT NULL;
$$;
ALTER FUNCTION mailroom_fleet.inspect(text) OWNER TO mailroom_fleet_owner;
REVOKE ALL ON FUNCTION mailroom_fleet.inspect(text) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION mailroom_fleet.inspect(text) TO mailroom_fleet_operator;
COMMENT ON FUNCTION mailroom_fleet.inspect(text) IS
  'mailroom.inspect(p_ref) on every shard: a row (shard, the mail as mailroom.inspect shows it) for each shard that has a mail with that delivery key (or id: ids repeat across shards). No row: no shard knows it. Fails when a shard cannot be reached.';

COMMIT;
