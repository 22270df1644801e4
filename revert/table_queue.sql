-- Revert mailroom:table_queue from pg

BEGIN;

DROP TABLE mailroom.queue;

COMMIT;
