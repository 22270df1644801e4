-- Verify mailroom:record_feedback on pg

BEGIN;

SELECT 1/has_function_privilege('mailroom_feedback', 'mailroom.record_feedback(text, bigint, text, text, text, text, text)', 'execute')::int;
SELECT 1/(NOT has_function_privilege('mailroom_runner', 'mailroom.record_feedback(text, bigint, text, text, text, text, text)', 'execute'))::int;

-- The rework: reports about one mail are recorded in turn, one bounced ledger row per mail.
SELECT 1/(pg_get_functiondef('mailroom.record_feedback(text, bigint, text, text, text, text, text)'::regprocedure) LIKE '%FOR NO KEY UPDATE%')::int;

ROLLBACK;
