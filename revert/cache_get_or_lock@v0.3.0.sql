-- Revert mailroom:cache_get_or_lock from pg

BEGIN;

DROP FUNCTION mailroom.cache_unlock(text);
DROP FUNCTION mailroom.cache_get_or_lock(text, interval, timestamptz);
DROP FUNCTION mailroom._cache_lock_id(text);

COMMIT;
