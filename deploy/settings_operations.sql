-- Deploy mailroom:settings_operations to pg
-- requires: table_settings

BEGIN;

-- Operator knobs: how long history is kept, how much prune deletes per
-- statement, and when an open transaction is old enough to warn about.
INSERT INTO mailroom.settings (key, value, description) VALUES
  ('attempts_retention',  '30 days', 'Finished mail (sent, failed, cancelled) and its ledger rows older than this are pruned. Also the window in which a delivery key stays idempotent.'),
  ('prune_batch_size',    '5000',    'Messages deleted per statement by mailroom.prune (its ledger rows go with them).'),
  ('prune_max_batches',   '20',      'Batches one mailroom.prune call deletes at most; the pg_cron job catches up over later runs.'),
  ('lease_warning_after', '5 minutes', 'queue_stats warns when a transaction has been open longer than this (vacuum cannot clean the queue behind it). Keep it at or below the runners'' lease.')
ON CONFLICT (key) DO NOTHING;

COMMIT;
