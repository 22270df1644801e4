-- Verify mailroom:table_templates on pg

BEGIN;

SELECT key, subject, body_text, body_html, created_at, updated_at FROM mailroom.templates WHERE false;
SELECT has_function_privilege('mailroom.upsert_template(text, text, text, text, timestamptz)', 'execute');
SELECT has_function_privilege('mailroom.get_templates(text[])', 'execute');

ROLLBACK;
