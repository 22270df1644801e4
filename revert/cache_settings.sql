-- Revert mailroom:cache_settings from pg

BEGIN;

DELETE FROM mailroom.settings WHERE key = 'cache_max_entries';

COMMIT;
