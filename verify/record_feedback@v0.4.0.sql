-- Verify mailroom:record_feedback on pg

BEGIN;

SELECT 1/has_function_privilege('mailroom_feedback', 'mailroom.record_feedback(text, bigint, text, text, text, text, text)', 'execute')::int;
SELECT 1/(NOT has_function_privilege('mailroom_runner', 'mailroom.record_feedback(text, bigint, text, text, text, text, text)', 'execute'))::int;

ROLLBACK;
