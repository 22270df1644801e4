-- Verify mailroom:attempts_value_checks_dropped on pg

BEGIN;

DO $$
BEGIN
  ASSERT (SELECT array_agg(c.conname::text ORDER BY c.conname) FROM pg_catalog.pg_constraint c
          WHERE c.conrelid = 'mailroom.attempts'::regclass AND c.contype = 'c')
         = ARRAY['attempts_finish_key_valid', 'attempts_finished_with_outcome'],
    'the ledger should check its two invariants and nothing else';
END
$$;

ROLLBACK;
