-- Verify mailroom:cache_settings on pg

BEGIN;

SELECT 1/count(*) FROM mailroom.settings WHERE key = 'cache_max_entries' AND value::bigint >= 0;

ROLLBACK;
