-- Verify mailroom:upsert_template on pg

BEGIN;

SELECT has_function_privilege('mailroom_app', 'mailroom.upsert_template(text, text, text, text, timestamptz)', 'execute');
DO $$
BEGIN
  ASSERT (SELECT prosrc FROM pg_proc
          WHERE oid = 'mailroom.upsert_template(text, text, text, text, timestamptz)'::regprocedure)
         LIKE '%_check_body(''body_text''%', 'upsert_template does not check the body size';
END
$$;

ROLLBACK;
