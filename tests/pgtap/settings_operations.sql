-- Tests for mailroom:settings_operations
BEGIN;
SELECT plan(4);

SELECT results_eq(
  $$SELECT key FROM mailroom.settings
    WHERE key IN ('attempts_retention', 'prune_batch_size', 'prune_max_batches', 'lease_warning_after') ORDER BY key$$,
  $$VALUES ('attempts_retention'::text), ('lease_warning_after'), ('prune_batch_size'), ('prune_max_batches')$$,
  'the operator settings exist');
SELECT ok((SELECT value::interval >= interval '1 day' FROM mailroom.settings WHERE key = 'attempts_retention'),
  'attempts_retention is an interval prune accepts');
SELECT ok((SELECT value::integer > 0 FROM mailroom.settings WHERE key = 'prune_batch_size')
          AND (SELECT value::integer > 0 FROM mailroom.settings WHERE key = 'prune_max_batches'),
  'prune batch settings are positive integers');
SELECT ok((SELECT value::interval > interval '0' FROM mailroom.settings WHERE key = 'lease_warning_after'),
  'lease_warning_after is a positive interval');

SELECT * FROM finish();
ROLLBACK;
