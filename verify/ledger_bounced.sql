-- Verify mailroom:ledger_bounced on pg

BEGIN;

DO $$
BEGIN
  ASSERT (SELECT pg_catalog.pg_get_constraintdef(c.oid) FROM pg_catalog.pg_constraint c
          WHERE c.conrelid = 'mailroom.attempts'::regclass AND c.conname = 'attempts_outcome_valid') LIKE '%bounced%',
         'the ledger does not accept bounced rows';
END
$$;

ROLLBACK;
