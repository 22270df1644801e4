-- Revert mailroom:keep_unparsed_inbound from pg

BEGIN;

DROP FUNCTION mailroom.keep_unparsed_inbound(bytea, text, text, text);

COMMIT;
