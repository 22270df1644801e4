-- Verify mailroom:integrity_problems on pg

BEGIN;

SELECT problem, message_id, detail FROM mailroom.integrity_problems() WHERE false;
SELECT 1/has_function_privilege('mailroom_operator', 'mailroom.integrity_problems()', 'execute')::integer;

ROLLBACK;
