-- Revert mailroom:message_guard from pg

BEGIN;

DROP TRIGGER messages_guard_requeue ON mailroom.messages;
DROP FUNCTION mailroom._message_guard();

COMMIT;
