-- Verify mailroom_fleet:enqueue on pg

BEGIN;

SELECT 1/(mailroom_fleet.address_key('Ann@ÜNICODE.de') = 'Ann@xn--nicode-2ya.de')::int;
SELECT 1/(mailroom_fleet.shard_key('ann@Example.COM') = hashtext('ann@example.com'))::int;
SELECT 1/has_function_privilege('mailroom_fleet_app',
  'mailroom_fleet.enqueue(text, text, text, text, jsonb, text, timestamptz, integer, text, integer, text, jsonb, text, text)', 'execute')::int;
SELECT 1/(NOT has_function_privilege('public', 'mailroom_fleet.shard_key(text)', 'execute'))::int;

ROLLBACK;
