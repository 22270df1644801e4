-- Revert mailroom:cache_delete_prefix from pg

BEGIN;

DROP FUNCTION mailroom.cache_delete_prefix(text);

COMMIT;
