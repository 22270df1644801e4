-- Revert mailroom:forget from pg. The forgotten addresses' table, their
-- hashes and the pepper belong to the change forgotten_addresses and stay
-- (claim_batch's gate still refuses mail to them).

BEGIN;

DROP FUNCTION mailroom.is_forgotten(text);
DROP FUNCTION mailroom.forget(text);
DROP FUNCTION mailroom._mentions(text, text);

COMMIT;
