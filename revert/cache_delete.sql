-- Revert mailroom:cache_delete from pg

BEGIN;

DROP FUNCTION mailroom.cache_delete(text);

COMMIT;
