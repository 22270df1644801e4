-- Revert mailroom:table_runners from pg

BEGIN;

DROP TABLE mailroom.runners;

COMMIT;
