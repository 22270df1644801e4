-- Revert mailroom:runner_warnings from pg

BEGIN;

DROP FUNCTION mailroom.runner_warnings();

COMMIT;
