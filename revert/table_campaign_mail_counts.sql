-- Revert mailroom:table_campaign_mail_counts from pg

BEGIN;

DROP TABLE mailroom.campaign_mail_counts;

COMMIT;
