-- Revert mailroom:forget from pg. The hashes go with their table: every
-- forgotten address is mailable again (its content stays erased).

BEGIN;

DROP FUNCTION mailroom.is_forgotten(text);
DROP FUNCTION mailroom.forget(text);
DROP FUNCTION mailroom._mentions(text, text);
DROP FUNCTION mailroom._forgotten_hash(text);
DROP TABLE mailroom.forgotten_addresses;
DROP TABLE mailroom.erasure_pepper;

COMMIT;
