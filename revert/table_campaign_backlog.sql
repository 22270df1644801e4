-- Revert mailroom:table_campaign_backlog from pg

BEGIN;

DROP TABLE mailroom.campaign_backlog;

COMMIT;
