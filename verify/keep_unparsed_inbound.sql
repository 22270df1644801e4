-- Verify mailroom:keep_unparsed_inbound on pg

BEGIN;

SELECT 1/has_function_privilege('mailroom_feedback', 'mailroom.keep_unparsed_inbound(bytea, text, text, text)', 'execute')::int;

ROLLBACK;
