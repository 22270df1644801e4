-- pgTAP: mailroom.rate_limits and the epoch helpers
BEGIN;
SELECT plan(9);

SELECT has_table('mailroom', 'rate_limits', 'mailroom.rate_limits exists');
SELECT col_is_pk('mailroom', 'rate_limits', 'key', 'key is the primary key');
SELECT is((SELECT relpersistence::text FROM pg_class WHERE oid = 'mailroom.rate_limits'::regclass),
          'u', 'rate_limits is UNLOGGED');
SELECT table_owner_is('mailroom', 'rate_limits', 'mailroom_owner', 'owned by mailroom_owner');
SELECT table_privs_are('mailroom', 'rate_limits', 'mailroom_app', ARRAY[]::text[], 'mailroom_app has no table privileges');
SELECT is(mailroom._epoch_us('1970-01-01 00:00:01.000001+00'), 1000001::bigint, '_epoch_us counts microseconds');
SELECT is(mailroom._from_epoch_us(1796040000123457), '2026-11-30 12:00:00.123457+00'::timestamptz, '_from_epoch_us is exact to the microsecond');
SELECT throws_ok($$INSERT INTO mailroom.rate_limits (key, algorithm, window_length, expires_at) VALUES ('k', 'leaky', '1 s', now())$$,
                 '23514', NULL, 'an unknown algorithm violates rate_limits_algorithm');
SELECT is((SELECT count(*) FROM mailroom.rate_limits WHERE key = 'k'), 0::bigint, 'nothing was stored');

SELECT * FROM finish();
ROLLBACK;
