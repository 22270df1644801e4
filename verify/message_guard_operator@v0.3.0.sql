-- Verify mailroom:message_guard_operator on pg

BEGIN;

SELECT 1/count(*) FROM pg_trigger
WHERE tgrelid = 'mailroom.messages'::regclass AND tgname = 'messages_guard_operator_requeue' AND NOT tgisinternal;

ROLLBACK;
