-- Revert mailroom:runner_waiting from pg

BEGIN;

DROP FUNCTION mailroom.enqueues_settled();
DROP FUNCTION mailroom.runner_waiting(boolean);

COMMIT;
