-- Deploy mailroom_fleet:schema to pg

-- The directory database of a fleet of mailroom shards. Each shard is an
-- ordinary mailroom database (the main plan); the directory holds no mail,
-- only PL/Proxy functions that run mailroom's own functions on the shards:
-- on all of them (RUN ON ALL) or on the one an address hashes to.
--
-- The shard map is the SQL/MED server mailroom_fleet (the PL/Proxy cluster
-- of that name), which each site creates itself (docs/fleet.md):
--   CREATE SERVER mailroom_fleet FOREIGN DATA WRAPPER plproxy
--     OPTIONS (p0 'dbname=mail0 host=... port=...', p1 '...');
--   GRANT USAGE ON FOREIGN SERVER mailroom_fleet TO mailroom_fleet_owner;
--   CREATE USER MAPPING FOR mailroom_fleet_owner SERVER mailroom_fleet
--     OPTIONS (user '...', password '...');
-- The fleet's functions are SECURITY DEFINER, owned by mailroom_fleet_owner,
-- so PL/Proxy connects with that one mapping whoever calls them: operators
-- and applications get EXECUTE, never the shards' credentials.

BEGIN;

CREATE EXTENSION IF NOT EXISTS plproxy;

DO $$
DECLARE
  v_role text;
BEGIN
  FOREACH v_role IN ARRAY ARRAY['mailroom_fleet_owner', 'mailroom_fleet_operator', 'mailroom_fleet_app'] LOOP
    IF NOT EXISTS (SELECT FROM pg_catalog.pg_roles WHERE rolname = v_role) THEN
      EXECUTE format('CREATE ROLE %I NOLOGIN', v_role);
    END IF;
  END LOOP;
END
$$;
COMMENT ON ROLE mailroom_fleet_owner IS
  'Owns the fleet''s functions; its user mapping on the server mailroom_fleet is how the directory logs in to the shards. Nobody logs in as it.';
COMMENT ON ROLE mailroom_fleet_operator IS
  'Fleet operators: queue stats, inspect and suppressions over every shard.';
COMMENT ON ROLE mailroom_fleet_app IS
  'Applications of a fleet: enqueue on the address''s shard, suppress and unsuppress everywhere.';

CREATE SCHEMA mailroom_fleet AUTHORIZATION mailroom_fleet_owner;
REVOKE ALL ON SCHEMA mailroom_fleet FROM PUBLIC;
GRANT USAGE ON SCHEMA mailroom_fleet TO mailroom_fleet_operator, mailroom_fleet_app;
COMMENT ON SCHEMA mailroom_fleet IS
  'A fleet of mailroom shards seen from its directory: PL/Proxy functions over the cluster (SQL/MED server) mailroom_fleet.';

-- The partitions as PL/Proxy reads them: options p0 .. pN-1 of the server.
-- PL/Proxy's validator refuses a server whose partition count is not a
-- power of two, so this lists a valid map or nothing.
CREATE VIEW mailroom_fleet.shard_map AS
SELECT substr(o.key, 2)::integer AS partition, o.value AS connstr
FROM pg_catalog.pg_foreign_server s
CROSS JOIN LATERAL (SELECT split_part(opt, '=', 1) AS key, substr(opt, strpos(opt, '=') + 1) AS value
                    FROM unnest(s.srvoptions) AS opt) o
WHERE s.srvname = 'mailroom_fleet' AND o.key ~ '^p[0-9]+$'
ORDER BY 1;
ALTER VIEW mailroom_fleet.shard_map OWNER TO mailroom_fleet_owner;
REVOKE ALL ON mailroom_fleet.shard_map FROM PUBLIC;
GRANT SELECT ON mailroom_fleet.shard_map TO mailroom_fleet_operator, mailroom_fleet_app;
COMMENT ON VIEW mailroom_fleet.shard_map IS
  'The shard map: partition number and libpq connect string of each partition of the server mailroom_fleet (several partitions may name one database).';

COMMIT;
