-- Verify mailroom:role_feedback on pg

BEGIN;

DO $$
BEGIN
  ASSERT EXISTS (SELECT FROM pg_catalog.pg_roles WHERE rolname = 'mailroom_feedback' AND NOT rolcanlogin),
         'the NOLOGIN role mailroom_feedback is missing';
  ASSERT pg_catalog.has_schema_privilege('mailroom_feedback', 'mailroom', 'usage'),
         'mailroom_feedback cannot use the schema';
END
$$;

ROLLBACK;
