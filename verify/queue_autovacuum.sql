-- Verify mailroom:queue_autovacuum on pg

BEGIN;

DO $$
BEGIN
  ASSERT (SELECT reloptions @> ARRAY['autovacuum_vacuum_scale_factor=0', 'autovacuum_vacuum_threshold=10000',
                                     'autovacuum_vacuum_insert_threshold=10000']
          FROM pg_class WHERE oid = 'mailroom.attempts'::regclass),
    'the ledger lacks the queue autovacuum settings';
END
$$;

ROLLBACK;
