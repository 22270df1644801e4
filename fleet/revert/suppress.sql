-- Revert mailroom_fleet:suppress from pg

BEGIN;

DROP FUNCTION mailroom_fleet.unsuppress(text, text);
DROP FUNCTION mailroom_fleet.suppress(text, text, text, text);

COMMIT;
