-- Deploy mailroom:attempts_finished_at_idx to pg
-- requires: split_messages

-- Retention must cost O(mail retired) (issue 13). A finished mail is its
-- contents row plus its ledger rows, one of which is the finishing row
-- (finished_as set, finished_at = when it finished). This index holds only
-- finishing rows, ordered by finish time, so prune walks it from the oldest
-- end and stops after one batch; nothing else of the history is read, and
-- the hot queue not at all.
--
-- Not free: every finished mail inserts one more index entry. Measured on
-- the ledger alone (50,000 finishing rows inserted 50 per statement, as
-- mark_outcomes does, after a CHECKPOINT): 505 -> 571 bytes of WAL per row,
-- +66 bytes per finished mail. The alternatives that cost nothing per mail
-- were measured or reasoned worse: walking the ledger's or the contents'
-- primary key (message id order) re-reads, on every call, every mail older
-- than the cut-off that is still live or finished late (a campaign paused
-- for months, a review left open); a BRIN on finished_at stops pruning
-- anything cheaply once freed ledger pages are reused by new rows.
--
-- Built in the deploy's transaction (a Sqitch change cannot CREATE INDEX
-- CONCURRENTLY): on a large ledger it blocks writes to attempts while it
-- builds, like the ledger's primary key that split_messages builds just
-- before it.

BEGIN;

CREATE INDEX attempts_finished_at_idx ON mailroom.attempts (finished_at) WHERE finished_as IS NOT NULL;
COMMENT ON INDEX mailroom.attempts_finished_at_idx IS
  'Finishing ledger rows by finish time: prune finds the oldest finished mail in bounded batches.';

COMMIT;
