-- Verify mailroom:queue_autovacuum on pg

BEGIN;

DO $$
BEGIN
  ASSERT (SELECT bool_and(reloptions @> ARRAY['autovacuum_vacuum_scale_factor=0', 'autovacuum_vacuum_threshold=10000',
                                               'autovacuum_vacuum_insert_threshold=10000'])
          FROM pg_class WHERE oid IN ('mailroom.messages'::regclass, 'mailroom.attempts'::regclass)),
    'messages and attempts lack the queue autovacuum settings';
END
$$;

ROLLBACK;
