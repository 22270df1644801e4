-- Verify mailroom:feedback_message_id_matches on pg

BEGIN;

SELECT 1/has_function_privilege('mailroom_feedback', 'mailroom.feedback_message_id_matches(bigint, text)', 'execute')::int;

ROLLBACK;
