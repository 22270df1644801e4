-- Verify mailroom:message_lookup on pg

BEGIN;

SELECT 1/has_function_privilege('mailroom_feedback', 'mailroom.message_by_message_id(text)', 'execute')::int;

ROLLBACK;
