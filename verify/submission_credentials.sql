-- Verify mailroom:submission_credentials on pg

BEGIN;

SELECT username, password_hash, sender, allowed_from, stream, per_minute, created_at, updated_at
FROM mailroom.submission_credentials WHERE false;

DO $$
BEGIN
  ASSERT EXISTS (SELECT FROM pg_catalog.pg_roles WHERE rolname = 'mailroom_submission' AND NOT rolcanlogin),
         'the NOLOGIN role mailroom_submission is missing';
  ASSERT pg_catalog.has_function_privilege('mailroom_operator',
           'mailroom.set_submission_credential(text, text, text, text[], integer, text)', 'execute'),
         'operators cannot set submission credentials';
  ASSERT pg_catalog.has_function_privilege('mailroom_operator', 'mailroom.drop_submission_credential(text)', 'execute'),
         'operators cannot drop submission credentials';
  ASSERT pg_catalog.has_function_privilege('mailroom_operator', 'mailroom.submission_credential_list()', 'execute'),
         'operators cannot list submission credentials';
  ASSERT pg_catalog.has_function_privilege('mailroom_submission', 'mailroom.submission_login(text)', 'execute'),
         'mailroom_submission cannot read a login';
  ASSERT pg_catalog.has_function_privilege('mailroom_submission', 'mailroom.submission_recipient_refusal(text, text)',
                                           'execute'),
         'mailroom_submission cannot check a recipient';
  ASSERT NOT pg_catalog.has_function_privilege('mailroom_app', 'mailroom.submission_login(text)', 'execute'),
         'mailroom_app may not read password hashes';
END
$$;

ROLLBACK;
