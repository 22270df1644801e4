-- Revert mailroom:ledger_bounced from pg

BEGIN;

-- The bounced rows go with the outcome (their feedback events stay, and the
-- suppressions they caused).
DELETE FROM mailroom.attempts WHERE outcome = 'bounced';
ALTER TABLE mailroom.attempts
  DROP CONSTRAINT attempts_outcome_valid,
  ADD CONSTRAINT attempts_outcome_valid
    CHECK (outcome IN ('sent', 'retry', 'failed', 'ambiguous', 'expired', 'stale', 'released', 'cancelled', 'resolved'));
COMMENT ON COLUMN mailroom.attempts.outcome IS
  'What the queue made of the attempt: sent, retry, failed, ambiguous, expired (lease ran out), stale (reported after the lease was lost), released (handed back unsent); cancelled and resolved are decisions without an attempt (a cancel, a review resolved by an operator).';

COMMIT;
