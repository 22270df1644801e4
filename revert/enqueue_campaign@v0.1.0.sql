-- Revert mailroom:enqueue_campaign from pg

BEGIN;

DROP FUNCTION mailroom.enqueue_campaign(text, text, text, integer, timestamptz, jsonb, text, time, time, text, jsonb, integer, text, timestamptz);
DROP FUNCTION mailroom._campaign_fill(bigint, timestamptz);
DROP FUNCTION mailroom._campaign_open(text, text, integer, timestamptz, jsonb, text, time, time, text, jsonb, integer, text, timestamptz);
DROP FUNCTION mailroom._address_ok(text);

COMMIT;
