-- Verify mailroom:table_campaign_mail_counts on pg

BEGIN;

SELECT campaign_id, mails FROM mailroom.campaign_mail_counts WHERE false;

ROLLBACK;
