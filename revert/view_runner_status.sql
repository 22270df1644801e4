-- Revert mailroom:view_runner_status from pg

BEGIN;

DROP VIEW mailroom.runner_status;

COMMIT;
