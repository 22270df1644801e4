-- Deploy mailroom:attempts_successful_idx_dropped to pg
-- requires: split_messages
-- requires: attempts_claimed_at_brin

-- Every sent mail's ledger row cost a leaf insertion into
-- attempts_successful_idx (message_id) WHERE reported = 'sent': one of the
-- six B-tree insertions of a mail's claim and report. Every reader of it asks
-- about one message at a time (mark_outcomes' duplicate probe, inspect,
-- delivered_keys, review_queue, repeated_attempts, duplicate_deliveries,
-- delivery_metrics), and the ledger's primary key (message_id, finish_key)
-- answers that with the same one probe: a mail has a handful of ledger rows,
-- filtered on reported as they are read. Dropping an index is instant even on
-- a large ledger.

BEGIN;

DROP INDEX mailroom.attempts_successful_idx;

COMMIT;
