-- Revert mailroom:unsubscribe from pg

BEGIN;

DROP FUNCTION mailroom.unsubscribe(text, text, bigint, text);
REVOKE USAGE ON SCHEMA mailroom FROM mailroom_unsubscribe;

-- Roles are cluster-wide: keep it if another database still uses it.
DO $$
BEGIN
  DROP ROLE IF EXISTS mailroom_unsubscribe;
EXCEPTION WHEN dependent_objects_still_exist THEN
  RAISE NOTICE 'mailroom: role mailroom_unsubscribe kept: another database still uses it';
END
$$;

COMMIT;
