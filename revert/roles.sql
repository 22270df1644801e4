-- Revert mailroom:roles from pg

BEGIN;

REVOKE USAGE ON SCHEMA mailroom FROM mailroom_app, mailroom_runner, mailroom_operator;
ALTER SCHEMA mailroom OWNER TO CURRENT_USER;

-- Roles are cluster-wide: keep a role another database still uses.
DO $$
DECLARE
  v_role text;
BEGIN
  FOREACH v_role IN ARRAY ARRAY['mailroom_operator', 'mailroom_runner', 'mailroom_app', 'mailroom_owner'] LOOP
    BEGIN
      EXECUTE format('DROP ROLE IF EXISTS %I', v_role);
    EXCEPTION WHEN dependent_objects_still_exist THEN
      RAISE NOTICE 'mailroom: role % kept: another database still uses it', v_role;
    END;
  END LOOP;
END
$$;

COMMIT;
