-- Verify mailroom:table_cache on pg

BEGIN;

SELECT key, value, expires_at, created_at, accessed_at
  FROM mailroom.cache
 WHERE false;

DO $$
BEGIN
  ASSERT (SELECT relpersistence FROM pg_catalog.pg_class
           WHERE oid = 'mailroom.cache'::regclass) = 'u',
         'mailroom.cache is not UNLOGGED';
END
$$;

ROLLBACK;
