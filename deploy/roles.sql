-- Deploy mailroom:roles to pg
-- requires: schema

BEGIN;

-- Roles are cluster-wide: another database on this cluster may have made them.
DO $$
DECLARE
  v_role text;
BEGIN
  FOREACH v_role IN ARRAY ARRAY['mailroom_owner', 'mailroom_app', 'mailroom_runner', 'mailroom_operator'] LOOP
    IF NOT EXISTS (SELECT FROM pg_catalog.pg_roles WHERE rolname = v_role) THEN
      EXECUTE format('CREATE ROLE %I NOLOGIN', v_role);
    END IF;
  END LOOP;
END
$$;

COMMENT ON ROLE mailroom_owner IS
  'Owns mailroom''s tables and SECURITY DEFINER functions; nobody logs in as it.';
COMMENT ON ROLE mailroom_app IS
  'Applications: enqueue mail, campaigns, schedules, suppressions, cache, rate limits.';
COMMENT ON ROLE mailroom_runner IS
  'Runners: claim, report outcomes, extend and release leases, reclaim.';
COMMENT ON ROLE mailroom_operator IS
  'Operators: the recovery views and retry, cancel and review decisions.';

ALTER SCHEMA mailroom OWNER TO mailroom_owner;
GRANT USAGE ON SCHEMA mailroom TO mailroom_app, mailroom_runner, mailroom_operator;

-- Every function revokes EXECUTE from PUBLIC itself, in its own change:
-- default privileges would only cover functions *created* by the owner role,
-- and Sqitch creates them as the deployer.

COMMIT;
