-- Revert mailroom:campaign_control from pg

BEGIN;

DROP VIEW mailroom.campaign_progress;
DROP FUNCTION mailroom.finish_campaigns(timestamptz);
DROP FUNCTION mailroom.cancel_campaign(bigint, timestamptz);
DROP FUNCTION mailroom.resume_campaign(bigint, timestamptz);
DROP FUNCTION mailroom.pause_campaign(bigint, timestamptz);
DROP FUNCTION mailroom._campaign_lock(bigint);

COMMIT;
