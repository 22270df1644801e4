-- Revert mailroom:submission_credentials from pg

BEGIN;

DROP FUNCTION mailroom.submission_recipient_refusal(text, text);
DROP FUNCTION mailroom.submission_login(text);
DROP FUNCTION mailroom.submission_credential_list();
DROP FUNCTION mailroom.drop_submission_credential(text);
DROP FUNCTION mailroom.set_submission_credential(text, text, text, text[], integer, text);
DROP TABLE mailroom.submission_credentials;
REVOKE USAGE ON SCHEMA mailroom FROM mailroom_submission;

-- Roles are cluster-wide: keep it while another database still uses it.
DO $$
BEGIN
  DROP ROLE IF EXISTS mailroom_submission;
EXCEPTION WHEN dependent_objects_still_exist THEN
  RAISE NOTICE 'mailroom: role mailroom_submission kept: another database still uses it';
END
$$;

COMMIT;
