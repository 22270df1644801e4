-- Revert mailroom:table_templates from pg

BEGIN;

DROP FUNCTION mailroom.get_templates(text[]);
DROP FUNCTION mailroom.upsert_template(text, text, text, text, timestamptz);
DROP TABLE mailroom.templates;

COMMIT;
