-- Verify mailroom:table_rate_limits on pg

BEGIN;

SELECT key, algorithm, window_length, window_start, hits, slots, slot_hits, expires_at
  FROM mailroom.rate_limits
 WHERE false;

DO $$
BEGIN
  ASSERT (SELECT relpersistence FROM pg_catalog.pg_class
           WHERE oid = 'mailroom.rate_limits'::regclass) = 'u',
         'mailroom.rate_limits is not UNLOGGED';
  ASSERT mailroom._from_epoch_us(mailroom._epoch_us('2026-11-30 08:00:00.123456+00'))
         = '2026-11-30 08:00:00.123456+00'::timestamptz,
         'epoch microsecond helpers do not round-trip';
END
$$;

ROLLBACK;
