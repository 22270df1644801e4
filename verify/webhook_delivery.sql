-- Verify mailroom:webhook_delivery on pg

BEGIN;

SELECT name, url, secret_name, kinds, streams, max_failures, status, cursor_xid, cursor_id, failures,
       next_attempt_at, lease_token, leased_until
FROM mailroom.webhook_endpoints WHERE false;
SELECT name, status, events_behind, key_offered_at, warning FROM mailroom.webhook_status WHERE false;
SELECT secret_name, offered_at FROM mailroom.webhook_keys_offered WHERE false;
SELECT has_function_privilege('mailroom.webhook_endpoint_set(text, text, text, text[], text[], integer, boolean)', 'execute');
SELECT has_function_privilege('mailroom.webhook_claim(text, text[], integer, integer, interval)', 'execute');
SELECT has_function_privilege('mailroom.webhook_report(text, uuid, text, integer, text, interval)', 'execute');

ROLLBACK;
