-- Revert mailroom:rate_limit_sliding from pg

BEGIN;

DROP FUNCTION mailroom.rate_limit_sliding(text, integer, interval, timestamptz);
DROP FUNCTION mailroom._rate_sliding_take(text, integer, integer, interval, timestamptz);

COMMIT;
