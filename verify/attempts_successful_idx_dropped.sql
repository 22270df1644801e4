-- Verify mailroom:attempts_successful_idx_dropped on pg

BEGIN;

DO $$
BEGIN
  ASSERT to_regclass('mailroom.attempts_successful_idx') IS NULL,
    'attempts_successful_idx is still there';
  ASSERT (SELECT pg_catalog.pg_get_constraintdef(c.oid) FROM pg_catalog.pg_constraint c
          WHERE c.conrelid = 'mailroom.attempts'::regclass AND c.conname = 'attempts_pkey')
         LIKE 'PRIMARY KEY (message_id, %',
    'the ledger''s primary key (which serves the per-message success probes) does not lead with message_id';
END
$$;

ROLLBACK;
