-- Deploy mailroom:attempts_claimed_at_brin to pg
-- requires: split_messages

-- Every attempt writes one ledger row, and each of the ledger's B-tree
-- indexes costs that row an index insertion: 7 of the 12 WAL records a mail
-- writes for its claim and its report are index insertions (pg_waldump
-- --stats over bench/mailroom_sql.pgbench). claimed_at is read only in
-- ranges (delivery_metrics: attempts claimed within a window) and rows are
-- written when their attempt ends, minutes at most after their claim, so the
-- column follows the table's physical order closely: a BRIN index serves
-- those range reads and is written only when a block range is summarised.

BEGIN;

DROP INDEX mailroom.attempts_claimed_at_idx;
CREATE INDEX attempts_claimed_at_brin ON mailroom.attempts USING brin (claimed_at)
  WITH (pages_per_range = 16, autosummarize = on);
COMMENT ON INDEX mailroom.attempts_claimed_at_brin IS
  'Ledger rows by claim time, for window reads: BRIN (rows are written when the attempt ends, close to their claim), so no B-tree insertion per attempt.';

COMMIT;
