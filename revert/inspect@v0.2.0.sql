-- Revert mailroom:inspect from pg

BEGIN;

DROP FUNCTION mailroom.inspect(text);

COMMIT;
