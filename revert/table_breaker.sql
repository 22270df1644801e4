-- Revert mailroom:table_breaker from pg

BEGIN;

DROP TABLE mailroom.breaker_trips;
DROP TABLE mailroom.sender_pauses;
DROP TABLE mailroom.breaker_counts;
DROP TABLE mailroom.breaker_settings;

COMMIT;
