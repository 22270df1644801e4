-- Revert mailroom:webhook_delivery from pg

BEGIN;

DROP VIEW mailroom.webhook_status;
-- event_feed's own: nobody holds events.
CREATE OR REPLACE FUNCTION mailroom._events_held(OUT xid xid8, OUT id bigint)
RETURNS SETOF record
LANGUAGE sql STABLE
SET search_path = mailroom, pg_temp
AS $$
  SELECT NULL::xid8, NULL::bigint WHERE false
$$;
COMMENT ON FUNCTION mailroom._events_held() IS
  'Internal (prune_events): the oldest feed cursor a reader still needs the events after, or no row.';
DROP FUNCTION mailroom.webhook_report(text, uuid, text, integer, text, interval);
DROP FUNCTION mailroom.webhook_claim(text, text[], integer, integer, interval);
DROP FUNCTION mailroom.webhook_endpoint_delete(text);
DROP FUNCTION mailroom.webhook_endpoint_resume(text);
DROP FUNCTION mailroom.webhook_endpoint_pause(text);
DROP FUNCTION mailroom.webhook_endpoint_set(text, text, text, text[], text[], integer, boolean);
DROP TABLE mailroom.webhook_endpoints;

COMMIT;
