-- Revert mailroom:message_guard_operator from pg

BEGIN;

DROP TRIGGER messages_guard_operator_requeue ON mailroom.messages;

COMMIT;
