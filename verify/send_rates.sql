-- Verify mailroom:send_rates on pg

BEGIN;

DO $$
BEGIN
  ASSERT (SELECT used FROM mailroom._rate_slots_used('{10, 60}', '{1, 2}', 60)) = 3,
         '_rate_slots_used is missing or wrong';
  ASSERT mailroom._rate_slot('1970-01-01 00:00:01+00', interval '1 second') = 50,
         '_rate_slot is missing or wrong';
  ASSERT NOT pg_catalog.has_function_privilege('mailroom_runner',
           'mailroom._send_rate_available(text, integer, integer, timestamptz)', 'execute'),
         '_send_rate_available is internal';
  ASSERT NOT pg_catalog.has_function_privilege('mailroom_runner',
           'mailroom._send_rate_record(text[], integer[], interval[], timestamptz)', 'execute'),
         '_send_rate_record is internal';
  ASSERT NOT pg_catalog.has_function_privilege('mailroom_runner',
           'mailroom._send_budgets(text, text[], integer[], integer[], timestamptz)', 'execute'),
         '_send_budgets is internal';
  ASSERT NOT pg_catalog.has_function_privilege('mailroom_runner',
           'mailroom._domain_budgets_spend(text[], integer[], integer[], timestamptz, integer)', 'execute'),
         '_domain_budgets_spend is internal';
  ASSERT (SELECT slot_hits FROM mailroom._rate_slots_add('{10, 60}', '{1, 2}', 60, 3)) = '{1, 5}',
         '_rate_slots_add is missing or wrong';
END
$$;

ROLLBACK;
