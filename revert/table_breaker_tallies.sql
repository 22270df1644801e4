-- Revert mailroom:table_breaker_tallies from pg

BEGIN;

DROP TABLE mailroom.breaker_bad_events;
DROP TABLE mailroom.breaker_delivered;
DROP TABLE mailroom.breaker_pending;

COMMIT;
