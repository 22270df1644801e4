-- Revert mailroom:retry from pg

BEGIN;

DROP FUNCTION mailroom.retry_campaign(bigint, timestamptz);
DROP FUNCTION mailroom.retry(bigint[], timestamptz);
DROP FUNCTION mailroom._check_ids(bigint[]);

COMMIT;
