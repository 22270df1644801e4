-- Revert mailroom:message_lookup from pg

BEGIN;

DROP FUNCTION mailroom.message_by_message_id(text);

COMMIT;
