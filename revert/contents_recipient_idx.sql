-- Revert mailroom:contents_recipient_idx from pg

BEGIN;

DROP INDEX mailroom.contents_recipient_idx;

COMMIT;
