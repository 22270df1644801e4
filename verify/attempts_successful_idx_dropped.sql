-- Verify mailroom:attempts_successful_idx_dropped on pg

BEGIN;

DO $$
BEGIN
  ASSERT to_regclass('mailroom.attempts_successful_idx') IS NULL,
    'attempts_successful_idx is still there';
  ASSERT to_regclass('mailroom.attempts_message_idx') IS NOT NULL,
    'attempts_message_idx (which serves the per-message success probes) is missing';
END
$$;

ROLLBACK;
