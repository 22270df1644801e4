-- Verify mailroom:table_templates on pg

BEGIN;

SELECT key, subject, body_text, body_html, created_at, updated_at FROM mailroom.templates WHERE false;
-- upsert_template by name: its signature is the upsert_template change's
-- (v0.4 dropped p_now), this change only created the first one.
SELECT 1 / count(*) FROM pg_catalog.pg_proc
 WHERE pronamespace = 'mailroom'::regnamespace AND proname = 'upsert_template';
SELECT has_function_privilege('mailroom.get_templates(text[])', 'execute');

ROLLBACK;
