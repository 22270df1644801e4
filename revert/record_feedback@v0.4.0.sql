-- Revert mailroom:record_feedback from pg

BEGIN;

DROP FUNCTION mailroom.record_feedback(text, bigint, text, text, text, text, text);

COMMIT;
