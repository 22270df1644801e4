-- Revert mailroom:table_inbound_unparsed from pg

BEGIN;

DROP TABLE mailroom.inbound_unparsed;

COMMIT;
