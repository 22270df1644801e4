-- Verify mailroom:message_guard on pg

BEGIN;

SELECT 1/count(*) FROM pg_catalog.pg_trigger
WHERE tgname = 'messages_guard_requeue' AND tgrelid = 'mailroom.messages'::regclass;
SELECT has_function_privilege('mailroom._message_guard()', 'execute');

ROLLBACK;
