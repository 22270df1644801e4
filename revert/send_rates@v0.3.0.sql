-- Revert mailroom:send_rates from pg

BEGIN;

DROP FUNCTION mailroom._send_rate_record(text[], integer[], interval[], timestamptz);
DROP FUNCTION mailroom._send_rate_available(text, integer, integer, timestamptz);
DROP FUNCTION mailroom._rate_slots_add(bigint[], integer[], bigint, integer);
DROP FUNCTION mailroom._rate_slots_used(bigint[], integer[], bigint);
DROP FUNCTION mailroom._rate_slot(timestamptz, interval);

COMMIT;
