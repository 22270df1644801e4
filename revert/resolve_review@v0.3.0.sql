-- Revert mailroom:resolve_review from pg

BEGIN;

DROP FUNCTION mailroom.resolve_review(bigint, text, timestamptz);

COMMIT;
