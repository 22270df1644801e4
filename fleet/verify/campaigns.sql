-- Verify mailroom_fleet:campaigns on pg (no shard is called)

BEGIN;

SELECT 1/has_function_privilege('mailroom_fleet_app',
  'mailroom_fleet.enqueue_campaign(text, text, text[], text[], jsonb[], text[], integer, timestamptz, jsonb, text, time, time, text, jsonb, integer, text, text)', 'execute')::int;
SELECT 1/has_function_privilege('mailroom_fleet_operator', 'mailroom_fleet.campaign_total(text)', 'execute')::int;
SELECT 1/has_function_privilege('mailroom_fleet_operator', 'mailroom_fleet.cancel_campaign(text)', 'execute')::int;
SELECT 1/(NOT has_function_privilege('public', 'mailroom_fleet._campaign_control(text, text)', 'execute'))::int;

ROLLBACK;
