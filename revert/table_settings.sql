-- Revert mailroom:table_settings from pg

BEGIN;

DROP FUNCTION mailroom.set_setting(text, text);
DROP FUNCTION mailroom._setting(text);
DROP TABLE mailroom.settings;

COMMIT;
