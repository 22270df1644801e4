-- Revert mailroom:send_rates from pg

BEGIN;

DROP FUNCTION mailroom._send_rate_take(text, integer, integer, integer, timestamptz);
DROP FUNCTION mailroom._send_rate_available(text, integer, integer, timestamptz);
DROP FUNCTION mailroom._rate_sliding_remaining(bigint[], integer[], integer, interval, timestamptz);

COMMIT;
