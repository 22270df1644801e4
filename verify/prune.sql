-- Verify mailroom:prune on pg

BEGIN;

SELECT 1/has_function_privilege('mailroom_operator', 'mailroom.prune(interval, integer)', 'execute')::integer;
DO $$
BEGIN
  ASSERT to_regprocedure('mailroom.prune(interval, timestamptz)') IS NULL,
    'prune still takes a clock parameter';
  ASSERT NOT has_function_privilege('mailroom_operator', 'mailroom._prune(interval, integer, timestamptz)', 'execute'),
    'operators may pin the clock of prune';
  BEGIN
    PERFORM mailroom.prune(interval '1000 years');
    RAISE EXCEPTION 'prune accepted older_than of 1000 years';
  EXCEPTION WHEN invalid_parameter_value THEN
    NULL;
  END;
END
$$;

ROLLBACK;
