-- Verify mailroom:ledger_bounced on pg

BEGIN;

DO $$
BEGIN
  -- (attempts_value_checks_dropped drops the check later in the plan.)
  ASSERT coalesce((SELECT pg_catalog.pg_get_constraintdef(c.oid) FROM pg_catalog.pg_constraint c
                   WHERE c.conrelid = 'mailroom.attempts'::regclass AND c.conname = 'attempts_outcome_valid')
                  LIKE '%bounced%', true),
         'the ledger does not accept bounced rows';
END
$$;

ROLLBACK;
