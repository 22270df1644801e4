-- Revert mailroom_fleet:schema from pg. The roles stay (they are cluster-wide
-- and may own a user mapping); the extension stays when the site's server
-- mailroom_fleet still uses its foreign-data wrapper.

BEGIN;

DROP SCHEMA mailroom_fleet CASCADE;

DO $$
BEGIN
  IF NOT EXISTS (SELECT FROM pg_catalog.pg_foreign_server s
                 JOIN pg_catalog.pg_foreign_data_wrapper w ON w.oid = s.srvfdw
                 WHERE w.fdwname = 'plproxy') THEN
    DROP EXTENSION IF EXISTS plproxy;
  END IF;
END
$$;

COMMIT;
