-- Revert mailroom:table_domain_limits from pg

BEGIN;

DROP FUNCTION mailroom.delete_domain_limits(text);
DROP FUNCTION mailroom.set_domain_limits(text, integer, integer);
DROP TABLE mailroom.domain_limits;

COMMIT;
