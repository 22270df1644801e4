-- Verify mailroom:function_next_occurrence on pg

BEGIN;

SELECT 1/count(*) FROM mailroom.time_zones WHERE name = 'Europe/Berlin';
SELECT has_function_privilege('mailroom.next_occurrence(text, text, timestamptz)', 'execute');
SELECT has_function_privilege('mailroom._next_occurrence(mailroom.cron_spec, text, timestamptz)', 'execute');
SELECT has_function_privilege('mailroom._local_to_instant(timestamp, text)', 'execute');
SELECT has_function_privilege('mailroom._zone_check(text, text)', 'execute');
DO $$
BEGIN
  ASSERT mailroom.next_occurrence('30 2 * * *', 'Europe/Berlin', '2026-03-28 12:00Z')
         = '2026-03-29 01:00Z', 'next_occurrence does not handle the DST gap';
  ASSERT has_function_privilege('mailroom_app', 'mailroom.next_occurrence(text, text, timestamptz)', 'execute'),
         'mailroom_app cannot call next_occurrence';
END
$$;

ROLLBACK;
