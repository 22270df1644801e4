-- Revert mailroom:runner_heartbeat from pg

BEGIN;

DROP FUNCTION mailroom.runner_gone(text, uuid);
DROP FUNCTION mailroom.runner_heartbeat(text, uuid, text, integer, text, text, integer, interval, integer, bigint, bigint, bigint, bigint, boolean, text);

COMMIT;
