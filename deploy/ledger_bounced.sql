-- Deploy mailroom:ledger_bounced to pg
-- requires: split_messages

-- A bounce reported after the mail finished (a relay accepted it, then a DSN
-- or a webhook said it failed) is one more ledger row of the mail: outcome
-- bounced, finished_at the time it was recorded, the reported status and
-- diagnostic in smtp_enhanced / smtp_text, and no claim (claimed_at, worker,
-- lease_token NULL) and no finished_as. The mail's finishing row stays as it
-- was (it finished sent: the relay did take it), so the one finishing row per
-- mail (the ledger's primary key) and integrity_problems() hold; the bounce is
-- what the ledger adds, shown by inspect in order. It is not an attempt: the
-- views and metrics that count attempts leave it out like cancelled and
-- resolved rows (it has no claimed_at, so delivery_metrics' window never sees
-- it).

BEGIN;

ALTER TABLE mailroom.attempts
  DROP CONSTRAINT attempts_outcome_valid,
  ADD CONSTRAINT attempts_outcome_valid
    CHECK (outcome IN ('sent', 'retry', 'failed', 'ambiguous', 'expired', 'stale', 'released', 'cancelled', 'resolved', 'bounced'));
COMMENT ON COLUMN mailroom.attempts.outcome IS
  'What the queue made of the attempt: sent, retry, failed, ambiguous, expired (lease ran out), stale (reported after the lease was lost), released (handed back unsent); cancelled and resolved are decisions without an attempt (a cancel, a review resolved by an operator); bounced is a permanent failure reported after the mail left (a DSN or a webhook, recorded by record_feedback), not an attempt either.';

COMMIT;
