-- Revert mailroom:forgotten_addresses from pg

BEGIN;

DROP FUNCTION mailroom._forgotten_hash(text);
DROP TABLE mailroom.forgotten_addresses;
DROP TABLE mailroom.erasure_pepper;

COMMIT;
