-- Verify mailroom:table_settings on pg

BEGIN;

SELECT key, value, description FROM mailroom.settings WHERE false;
SELECT 1 / count(*) FROM mailroom.settings WHERE key = 'retry_backoff_base';
SELECT has_function_privilege('mailroom.set_setting(text, text)', 'execute');

ROLLBACK;
