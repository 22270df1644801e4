-- Revert mailroom:forget from pg. The forgotten addresses' table, their
-- hashes and the pepper belong to claim_batch and stay (its gate still
-- refuses mail to them).

BEGIN;

DROP FUNCTION mailroom.is_forgotten(text);
DROP FUNCTION mailroom.forget(text);
DROP FUNCTION mailroom._mentions(text, text);

COMMIT;
