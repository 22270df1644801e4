-- Verify mailroom:table_domain_budgets on pg

BEGIN;

SELECT domain, second_slots, second_counts, minute_slots, minute_counts, per_second, per_minute, granted, expires_at
FROM mailroom.domain_budgets WHERE false;
DO $$
BEGIN
  ASSERT (SELECT relpersistence FROM pg_class WHERE oid = 'mailroom.domain_budgets'::regclass) = 'u',
         'domain_budgets is UNLOGGED';
  ASSERT NOT pg_catalog.has_table_privilege('mailroom_runner', 'mailroom.domain_budgets', 'select'),
         'domain_budgets is private';
END
$$;

ROLLBACK;
