-- Verify mailroom:settings_operations on pg

BEGIN;

SELECT 1/(count(*) = 4)::integer
FROM mailroom.settings
WHERE key IN ('attempts_retention', 'prune_batch_size', 'prune_max_batches', 'lease_warning_after');

SELECT value::interval, 1/(value::interval > interval '0')::integer FROM mailroom.settings WHERE key = 'attempts_retention';
SELECT value::interval FROM mailroom.settings WHERE key = 'lease_warning_after';
SELECT 1/(value::integer > 0)::integer FROM mailroom.settings WHERE key = 'prune_batch_size';

ROLLBACK;
