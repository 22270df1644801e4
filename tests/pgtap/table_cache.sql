-- pgTAP: mailroom.cache
BEGIN;
SELECT plan(10);

SELECT has_table('mailroom', 'cache', 'mailroom.cache exists');
SELECT columns_are('mailroom', 'cache',
  ARRAY['key', 'value', 'expires_at', 'created_at', 'accessed_at'], 'cache has the expected columns');
SELECT col_is_pk('mailroom', 'cache', 'key', 'key is the primary key');
SELECT is((SELECT relpersistence::text FROM pg_class WHERE oid = 'mailroom.cache'::regclass),
          'u', 'cache is UNLOGGED');
SELECT table_owner_is('mailroom', 'cache', 'mailroom_owner', 'owned by mailroom_owner');
SELECT is((SELECT collname::text FROM pg_attribute a JOIN pg_collation c ON c.oid = a.attcollation
            WHERE a.attrelid = 'mailroom.cache'::regclass AND a.attname = 'key'),
          'C', 'key is compared bytewise (COLLATE "C")');
SELECT table_privs_are('mailroom', 'cache', 'mailroom_app', ARRAY[]::text[], 'mailroom_app has no table privileges');
SELECT has_index('mailroom', 'cache', 'cache_expires_at_idx', 'expiry index for the sweep');

SELECT throws_ok($$INSERT INTO mailroom.cache (key, value) VALUES ('', '1')$$,
                 '23514', NULL, 'an empty key violates cache_key_length');
SELECT is((SELECT count(*) FROM mailroom.cache WHERE key = ''), 0::bigint, 'nothing was stored');

SELECT * FROM finish();
ROLLBACK;
