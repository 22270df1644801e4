-- Revert mailroom:mark_outcomes from pg: back to v0.1.0 (cached plans, sequential scans allowed).

BEGIN;

ALTER FUNCTION mailroom.mark_outcomes(jsonb, timestamptz) RESET plan_cache_mode;
ALTER FUNCTION mailroom.mark_outcomes(jsonb, timestamptz) RESET enable_seqscan;

COMMENT ON FUNCTION mailroom.mark_outcomes(jsonb, timestamptz) IS
  'Record a batch of outcomes [{id, token, outcome: sent|retry|failed|ambiguous, smtp_code, smtp_enhanced, detail, provider_id}] in one call. Returns how many applied; a report under a lost lease only writes the ledger (or settles a message as sent).';

COMMIT;
