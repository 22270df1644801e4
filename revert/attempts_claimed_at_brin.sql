-- Revert mailroom:attempts_claimed_at_brin from pg

BEGIN;

DROP INDEX mailroom.attempts_claimed_at_brin;
CREATE INDEX attempts_claimed_at_idx ON mailroom.attempts (claimed_at);

COMMIT;
