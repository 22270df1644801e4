-- Revert mailroom:table_rate_limits from pg

BEGIN;

DROP FUNCTION mailroom._from_epoch_us(bigint);
DROP FUNCTION mailroom._epoch_us(timestamptz);
DROP TABLE mailroom.rate_limits;

COMMIT;
