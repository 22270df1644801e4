-- Revert mailroom:enqueue from pg

BEGIN;

DROP FUNCTION mailroom.enqueue(text, text, text, text, jsonb, text, timestamptz, integer, text, integer, text, jsonb, text, timestamptz);

COMMIT;
