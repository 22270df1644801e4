-- Revert mailroom:table_suppressions from pg

BEGIN;

DROP TABLE mailroom.suppressions;
DROP FUNCTION mailroom._address_key(text);

COMMIT;
