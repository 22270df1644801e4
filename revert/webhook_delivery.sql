-- Revert mailroom:webhook_delivery from pg

BEGIN;

DROP VIEW mailroom.webhook_status;
DROP FUNCTION mailroom.webhook_report(text, uuid, text, integer, text, interval);
DROP FUNCTION mailroom.webhook_claim(text, text[], integer, integer, interval);
DROP FUNCTION mailroom.webhook_endpoint_delete(text);
DROP FUNCTION mailroom.webhook_endpoint_resume(text);
DROP FUNCTION mailroom.webhook_endpoint_pause(text);
DROP FUNCTION mailroom.webhook_endpoint_set(text, text, text, text[], text[], integer, boolean);
DROP TABLE mailroom.webhook_endpoints;

COMMIT;
