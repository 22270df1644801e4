-- Revert mailroom:claim_batch from pg

BEGIN;

DROP FUNCTION mailroom.claim_batch(text, integer, interval, text, timestamptz);

COMMIT;
