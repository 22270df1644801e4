-- Revert mailroom:destination_throttle from pg

BEGIN;

DROP FUNCTION mailroom.destination_rates();
DROP FUNCTION mailroom.set_destination_group(text, text);
DROP FUNCTION mailroom._learn_destination_rates(jsonb, timestamptz);
DROP FUNCTION mailroom._throttle_for(text);
DROP FUNCTION mailroom._throttle_ceiling(text);
DROP FUNCTION mailroom._provider_from_text(text);
DROP FUNCTION mailroom._is_rate_deferral(integer, text, text);
DROP FUNCTION mailroom._destination_group(text);
DROP TABLE mailroom.destination_throttles;
DROP TABLE mailroom.destination_groups;
DELETE FROM mailroom.settings
WHERE key IN ('throttle_decrease_factor', 'throttle_interval', 'throttle_increase_step', 'throttle_ceiling');

COMMIT;
