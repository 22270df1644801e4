-- Revert mailroom:view_settings_and_limits from pg

BEGIN;

DROP VIEW mailroom.send_limits;
DROP VIEW mailroom.current_settings;

COMMIT;
