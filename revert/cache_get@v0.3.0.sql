-- Revert mailroom:cache_get from pg

BEGIN;

DROP FUNCTION mailroom.cache_get(text, timestamptz);

COMMIT;
