-- Deploy mailroom:mark_outcomes to pg
-- requires: mark_outcomes@v0.1.0

-- Every statement of mark_outcomes looks up at most a batch of given keys
-- (messages by id, ledger rows by message and lease token). Its plans were
-- cached per session, made when the ledger was small or freshly analysed
-- while empty: then each call scanned the whole ledger (a hash join over a
-- sequential scan of mailroom.attempts), and a drain of 100,000 mails slowed
-- as the ledger grew, until autovacuum analysed it again. Planning every call
-- with the table's current size and without sequential scans keeps every
-- lookup an index lookup (bench/drain.py: mark_outcomes of 100 stays ~4 ms).

BEGIN;

ALTER FUNCTION mailroom.mark_outcomes(jsonb, timestamptz) SET plan_cache_mode = force_custom_plan;
ALTER FUNCTION mailroom.mark_outcomes(jsonb, timestamptz) SET enable_seqscan = off;

COMMENT ON FUNCTION mailroom.mark_outcomes(jsonb, timestamptz) IS
  'Record a batch of outcomes [{id, token, outcome: sent|retry|failed|ambiguous, smtp_code, smtp_enhanced, detail, provider_id}] in one call. Returns how many applied; a report under a lost lease only writes the ledger (or settles a message as sent). Planned afresh on every call without sequential scans, so its key lookups stay index lookups however small the ledger was when last analysed.';

COMMIT;
