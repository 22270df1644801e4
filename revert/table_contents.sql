-- Revert mailroom:table_contents from pg

BEGIN;

DROP TABLE mailroom.contents;

COMMIT;
