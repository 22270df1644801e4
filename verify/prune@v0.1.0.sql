-- Verify mailroom:prune on pg

BEGIN;

SELECT 1/has_function_privilege('mailroom_operator', 'mailroom.prune(interval, timestamptz)', 'execute')::integer;
SELECT 1/count(*) FROM pg_indexes WHERE schemaname = 'mailroom' AND indexname = 'messages_finished_idx';

ROLLBACK;
