-- Revert mailroom:cache_set from pg

BEGIN;

DROP FUNCTION mailroom.cache_set(text, jsonb, interval, timestamptz);

COMMIT;
