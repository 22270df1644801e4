-- Revert mailroom:table_messages from pg

BEGIN;

DROP TABLE mailroom.messages;

COMMIT;
