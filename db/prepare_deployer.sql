-- Once, as the role that will run `sqitch deploy` when it is not a superuser
-- (a LOGIN CREATEROLE role that owns the database, or holds CREATE on it),
-- before its first deploy into any database of the cluster:
--
--     psql "postgresql://deployer@db.example.com/app" -f db/prepare_deployer.sql
--
-- Why: mailroom's objects are owned by the NOLOGIN role mailroom_owner, and
-- PostgreSQL lets a role give an object to another role (ALTER ... OWNER TO,
-- which every deploy script does) and later replace that role's functions
-- (CREATE OR REPLACE, which every rework does) only when it is a member of
-- that role, inheriting its privileges. So the deployer must be a member of
-- mailroom_owner. A CREATEROLE role may grant itself that membership
-- (PostgreSQL 15), so this gives it nothing it could not already take; no
-- login an application, a runner or an operator uses may ever be a member
-- (docs/security.md, "Deploying as a role that is not a superuser").
--
-- Idempotent: creates mailroom_owner if no database of the cluster made it
-- yet (the deploy's roles change creates the other three), and grants the
-- membership unless the deployer has it. The deployer must be INHERIT (the
-- default): a NOINHERIT member cannot replace the owner's functions.

DO $$
BEGIN
  IF NOT EXISTS (SELECT FROM pg_catalog.pg_roles WHERE rolname = 'mailroom_owner') THEN
    CREATE ROLE mailroom_owner NOLOGIN;
  END IF;
  IF NOT pg_catalog.pg_has_role(current_user, 'mailroom_owner', 'USAGE') THEN
    EXECUTE pg_catalog.format('GRANT mailroom_owner TO %I', current_user);
  END IF;
END
$$;
