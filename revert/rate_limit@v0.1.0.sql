-- Revert mailroom:rate_limit from pg

BEGIN;

DROP FUNCTION mailroom.rate_limit(text, integer, interval, timestamptz);
DROP FUNCTION mailroom._rate_check_args(text, integer, interval);

COMMIT;
