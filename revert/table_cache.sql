-- Revert mailroom:table_cache from pg

BEGIN;

DROP TABLE mailroom.cache;

COMMIT;
