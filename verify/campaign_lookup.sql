-- Verify mailroom:campaign_lookup on pg

BEGIN;

SELECT campaign_id, status FROM mailroom.campaign_lookup('no such campaign') WHERE false;
SELECT 1/has_function_privilege('mailroom_app', 'mailroom.campaign_lookup(text)', 'execute')::int;
SELECT 1/(NOT has_function_privilege('public', 'mailroom.campaign_lookup(text)', 'execute'))::int;

ROLLBACK;
