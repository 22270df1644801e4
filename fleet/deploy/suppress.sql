-- Deploy mailroom_fleet:suppress to pg
-- requires: schema

-- A suppression must hold on every shard: mail to the address may sit on
-- any of them (a campaign enqueued straight into one shard, mail routed
-- before a shard was added). RUN ON ALL calls each shard's own
-- mailroom.suppress, whose gate at claim time is what stops the mail, with
-- the same arguments and so the same checks and stream scope.
--
-- PL/Proxy runs the call on each shard in its own connection, in autocommit:
-- there is no transaction across shards. A shard that refuses connections
-- fails the call before any shard is asked (PL/Proxy connects to all of
-- them first); a shard that fails after connecting (an error there, a crash,
-- a timeout) leaves the other shards' suppressions committed. Both are
-- idempotent per scope (suppress: the first reason stays; unsuppress:
-- deleting what is gone is no change), so the caller runs the same call
-- again until it succeeds (docs/fleet.md).

BEGIN;

CREATE FUNCTION mailroom_fleet.suppress(
  p_address text,
  p_reason  text DEFAULT 'manual',
  p_source  text DEFAULT NULL,
  p_stream  text DEFAULT NULL
)
RETURNS TABLE (shard text)
LANGUAGE plproxy
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
  CLUSTER 'mailroom_fleet';
  RUN ON ALL;
  SELECT pg_catalog.current_database()::text AS shard
  FROM mailroom.suppress(p_address, p_reason, p_source, p_stream) AS s;
$$;
ALTER FUNCTION mailroom_fleet.suppress(text, text, text, text) OWNER TO mailroom_fleet_owner;
REVOKE ALL ON FUNCTION mailroom_fleet.suppress(text, text, text, text) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION mailroom_fleet.suppress(text, text, text, text) TO mailroom_fleet_operator, mailroom_fleet_app;
COMMENT ON FUNCTION mailroom_fleet.suppress(text, text, text, text) IS
  'mailroom.suppress on every shard (same arguments: reason unsubscribed, hard_bounce, complaint or manual; p_stream NULL for all streams): returns the shards that committed it. Not atomic across shards: when it fails, run it again (idempotent).';

CREATE FUNCTION mailroom_fleet.unsuppress(p_address text, p_stream text DEFAULT NULL)
RETURNS TABLE (shard text, lifted boolean)
LANGUAGE plproxy
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
  CLUSTER 'mailroom_fleet';
  RUN ON ALL;
  SELECT pg_catalog.current_database()::text AS shard, u.lifted
  FROM mailroom.unsuppress(p_address, p_stream) AS u(lifted);
$$;
ALTER FUNCTION mailroom_fleet.unsuppress(text, text) OWNER TO mailroom_fleet_owner;
REVOKE ALL ON FUNCTION mailroom_fleet.unsuppress(text, text) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION mailroom_fleet.unsuppress(text, text) TO mailroom_fleet_operator, mailroom_fleet_app;
COMMENT ON FUNCTION mailroom_fleet.unsuppress(text, text) IS
  'mailroom.unsuppress on every shard: one row per shard, lifted true where that shard had a suppression to lift. Not atomic across shards: when it fails, run it again (idempotent).';

COMMIT;
