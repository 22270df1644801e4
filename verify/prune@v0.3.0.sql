-- Verify mailroom:prune on pg

BEGIN;

SELECT 1/has_function_privilege('mailroom_operator', 'mailroom.prune(interval, timestamptz)', 'execute')::integer;
SELECT 1/count(*) FROM pg_indexes WHERE schemaname = 'mailroom' AND indexname = 'messages_finished_idx';
DO $$
BEGIN
  BEGIN
    PERFORM mailroom.prune(interval '1000 years');
    RAISE EXCEPTION 'prune accepted older_than of 1000 years';
  EXCEPTION WHEN invalid_parameter_value THEN
    NULL;
  END;
END
$$;

ROLLBACK;
