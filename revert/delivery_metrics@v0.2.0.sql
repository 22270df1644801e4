-- Revert mailroom:delivery_metrics from pg

BEGIN;

DROP FUNCTION mailroom.delivery_metrics(interval, timestamptz);

COMMIT;
