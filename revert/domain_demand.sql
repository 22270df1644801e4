-- Revert mailroom:domain_demand from pg

BEGIN;

DROP FUNCTION mailroom.domain_demand(text[]);

COMMIT;
