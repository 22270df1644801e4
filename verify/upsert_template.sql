-- Verify mailroom:upsert_template on pg

BEGIN;

DO $$
BEGIN
  ASSERT pg_catalog.has_function_privilege('mailroom_app', 'mailroom.upsert_template(text, text, text, text)', 'execute'),
         'mailroom_app cannot execute upsert_template';
  ASSERT pg_catalog.to_regprocedure('mailroom.upsert_template(text, text, text, text, timestamptz)') IS NULL,
         'upsert_template still takes p_now';
  ASSERT (SELECT prosrc FROM pg_proc
          WHERE oid = 'mailroom.upsert_template(text, text, text, text)'::regprocedure)
         LIKE '%_check_body(''body_text''%', 'upsert_template does not check the body size';
END
$$;

ROLLBACK;
