-- Verify mailroom:feedback_message_id_matches on pg

BEGIN;

SELECT 1/has_function_privilege('mailroom_feedback', 'mailroom.feedback_message_id_matches(bigint, text)', 'execute')::int;
SELECT digest, mail_id FROM mailroom._message_id_parts('<x@y>') WHERE false;

ROLLBACK;
