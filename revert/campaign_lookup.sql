-- Revert mailroom:campaign_lookup from pg

BEGIN;

DROP FUNCTION mailroom.campaign_lookup(text);

COMMIT;
