-- Verify mailroom:function_next_occurrence on pg

BEGIN;

SELECT has_function_privilege('mailroom.next_occurrence(text, text, timestamptz)', 'execute');
SELECT 1 / count(*) FROM mailroom.time_zones WHERE name = 'Europe/Berlin';
SELECT 'mailroom._cron_value(text, text, integer, integer, text[])'::regprocedure,
       'mailroom._cron_field(text, text, integer, integer, text[])'::regprocedure,
       'mailroom._local_to_instant(timestamp, text)'::regprocedure,
       'mailroom._next_occurrence(mailroom.cron_spec, text, timestamptz)'::regprocedure;
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
