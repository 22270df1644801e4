-- Revert mailroom:settings_operations from pg

BEGIN;

DELETE FROM mailroom.settings
WHERE key IN ('attempts_retention', 'prune_batch_size', 'prune_max_batches', 'lease_warning_after');

COMMIT;
