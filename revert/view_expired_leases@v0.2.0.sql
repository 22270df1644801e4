-- Revert mailroom:view_expired_leases from pg

BEGIN;

DROP VIEW mailroom.expired_leases;
DROP INDEX mailroom.attempts_expired_idx;

COMMIT;
