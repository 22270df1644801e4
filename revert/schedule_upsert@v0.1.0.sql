-- Revert mailroom:schedule_upsert from pg

BEGIN;

DROP FUNCTION mailroom.schedule_set_active(text, boolean, timestamptz);
DROP FUNCTION mailroom.schedule_upsert(text, text, text, text, text, jsonb, boolean, time, time, text, integer, text, text, timestamptz);
DROP FUNCTION mailroom._schedule_retime(mailroom.schedules, mailroom.schedules, timestamptz);
DROP FUNCTION mailroom._schedule_delivery_key(bigint, timestamptz, text, text);

COMMIT;
