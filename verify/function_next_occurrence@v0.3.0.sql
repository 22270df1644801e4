-- Verify mailroom:function_next_occurrence on pg

BEGIN;

SELECT has_function_privilege('mailroom.next_occurrence(text, text, timestamptz)', 'execute');
SELECT 1 / count(*) FROM mailroom.time_zones WHERE name = 'Europe/Berlin';
DO $$
BEGIN
  ASSERT mailroom.next_occurrence('0 8 * * 1', 'Europe/Berlin', '2026-03-25Z') = '2026-03-30 06:00Z';
  BEGIN
    PERFORM mailroom.next_occurrence('0 8 * * 1', 'UTC', 'infinity');
    RAISE EXCEPTION 'function_next_occurrence: an infinite instant was accepted';
  EXCEPTION WHEN invalid_parameter_value THEN NULL;
  END;
END
$$;

ROLLBACK;
