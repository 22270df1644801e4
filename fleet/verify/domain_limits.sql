-- Verify mailroom_fleet:domain_limits on pg

BEGIN;

SELECT 1/has_function_privilege('mailroom_fleet_operator', 'mailroom_fleet.set_domain_limit(text, integer, integer)', 'execute')::int;
SELECT 1/has_function_privilege('mailroom_fleet_operator', 'mailroom_fleet.rebalance_domain_limits(text)', 'execute')::int;
SELECT 1/(NOT has_function_privilege('mailroom_fleet_app', 'mailroom_fleet.set_domain_limit(text, integer, integer)', 'execute'))::int;
SELECT 1/(NOT has_function_privilege('public', 'mailroom_fleet.rebalance_domain_limits(text)', 'execute'))::int;
SELECT domain, per_second, per_minute FROM mailroom_fleet.domain_limits WHERE false;
SELECT domain, shard, ceiling_second, ceiling_minute FROM mailroom_fleet.domain_shares WHERE false;

ROLLBACK;
