-- Revert mailroom:table_domain_budgets from pg (the budgets start fresh, as after a crash)

BEGIN;

DROP TABLE mailroom.domain_budgets;

COMMIT;
