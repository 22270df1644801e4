-- Verify mailroom:table_inbound_unparsed on pg

BEGIN;

SELECT id, received_at, reason, envelope_from, envelope_to, size, raw FROM mailroom.inbound_unparsed WHERE false;

ROLLBACK;
