-- Revert mailroom:role_feedback from pg

BEGIN;

REVOKE USAGE ON SCHEMA mailroom FROM mailroom_feedback;

-- Roles are cluster-wide: keep it while another database still uses it.
DO $$
BEGIN
  DROP ROLE IF EXISTS mailroom_feedback;
EXCEPTION WHEN dependent_objects_still_exist THEN
  RAISE NOTICE 'mailroom: role mailroom_feedback kept: another database still uses it';
END
$$;

COMMIT;
