-- Verify mailroom:view_settings_and_limits on pg

BEGIN;

SELECT key, value, description FROM mailroom.current_settings WHERE false;
SELECT kind, name, max_per_second, max_per_minute, updated_at FROM mailroom.send_limits WHERE false;
SELECT 1/has_table_privilege('mailroom_operator', 'mailroom.current_settings', 'select')::integer;
SELECT 1/has_table_privilege('mailroom_operator', 'mailroom.send_limits', 'select')::integer;

ROLLBACK;
