-- Revert mailroom_fleet:campaigns from pg

BEGIN;

DROP FUNCTION mailroom_fleet.cancel_campaign(text);
DROP FUNCTION mailroom_fleet.resume_campaign(text);
DROP FUNCTION mailroom_fleet.pause_campaign(text);
DROP FUNCTION mailroom_fleet._campaign_step(text, text);
DROP FUNCTION mailroom_fleet._campaign_control(text, text);
DROP FUNCTION mailroom_fleet.campaign_total(text);
DROP FUNCTION mailroom_fleet.campaign_progress(text);
DROP FUNCTION mailroom_fleet.enqueue_campaign(text, text, text[], text[], jsonb[], text[], integer, timestamptz, jsonb, text, time, time, text, jsonb, integer, text, text);
DROP FUNCTION mailroom_fleet._enqueue_campaign_split(text, text, text[], text[], jsonb[], text[], integer, timestamptz, jsonb, text, time, time, text, jsonb, integer, text, text);
DROP FUNCTION mailroom_fleet.create_campaign(text, text, integer, timestamptz, jsonb, text, time, time, text, jsonb, integer, text, text);
DROP FUNCTION mailroom_fleet.upsert_template(text, text, text, text);

COMMIT;
