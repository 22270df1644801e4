-- Revert mailroom:feedback_message_id_matches from pg

BEGIN;

DROP FUNCTION mailroom.feedback_message_id_matches(bigint, text);
DROP FUNCTION mailroom._message_id_parts(text);

COMMIT;
