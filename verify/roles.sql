-- Verify mailroom:roles on pg

BEGIN;

DO $$
BEGIN
  ASSERT (SELECT count(*) FROM pg_catalog.pg_roles
          WHERE rolname IN ('mailroom_owner', 'mailroom_app', 'mailroom_runner', 'mailroom_operator')
            AND NOT rolcanlogin) = 4,
         'the four NOLOGIN mailroom roles are missing';
  ASSERT pg_catalog.has_schema_privilege('mailroom_runner', 'mailroom', 'usage'),
         'mailroom_runner cannot use the schema';
END
$$;

ROLLBACK;
