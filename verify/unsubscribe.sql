-- Verify mailroom:unsubscribe on pg

BEGIN;

SELECT 1/has_function_privilege('mailroom_unsubscribe', 'mailroom.unsubscribe(text, text, bigint, text)', 'execute')::int;
SELECT 1/(NOT has_function_privilege('mailroom_unsubscribe', 'mailroom.suppress(text, text, text, text)', 'execute'))::int;

-- The rework: the function refuses streams without unsubscribe headers.
SELECT 1/(pg_get_functiondef('mailroom.unsubscribe(text, text, bigint, text)'::regprocedure) LIKE '%unsubscribe_headers%')::int;

ROLLBACK;
