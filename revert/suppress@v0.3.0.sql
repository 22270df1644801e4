-- Revert mailroom:suppress from pg

BEGIN;

DROP FUNCTION mailroom.unsuppress(text);
DROP FUNCTION mailroom.suppress(text, text, text, timestamptz);

COMMIT;
