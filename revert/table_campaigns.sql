-- Revert mailroom:table_campaigns from pg

BEGIN;

DROP INDEX mailroom.messages_campaign_recipient_unique;
ALTER TABLE mailroom.messages
  DROP CONSTRAINT messages_campaign_recipient_present,
  DROP CONSTRAINT messages_campaign_fk,
  DROP COLUMN recipient_zone;
DROP TABLE mailroom.campaigns;

COMMIT;
