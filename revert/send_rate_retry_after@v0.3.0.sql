-- Revert mailroom:send_rate_retry_after from pg

BEGIN;

DROP FUNCTION mailroom.send_rate_retry_after(text, timestamptz);
DROP FUNCTION mailroom._rate_free_at(bigint[], integer[], integer, interval, timestamptz);

COMMIT;
