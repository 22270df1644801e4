-- Revert mailroom:mark_outcomes from pg

BEGIN;

DROP FUNCTION mailroom.mark_outcome(bigint, uuid, text, text, integer, text, text, timestamptz);
DROP FUNCTION mailroom.mark_outcomes(jsonb, timestamptz);
DROP FUNCTION mailroom._retry_delay(integer);

COMMIT;
