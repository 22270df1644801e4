-- Revert mailroom:function_next_occurrence from pg

BEGIN;

DROP FUNCTION mailroom.next_occurrence(text, text, timestamptz);
DROP FUNCTION mailroom._next_occurrence(mailroom.cron_spec, text, timestamptz);
DROP FUNCTION mailroom._local_to_instant(timestamp, text);
DROP FUNCTION mailroom._cron_parse(text);
DROP FUNCTION mailroom._cron_field(text, text, int, int, text[]);
DROP FUNCTION mailroom._cron_value(text, text, int, int, text[]);
DROP FUNCTION mailroom._zone_check(text, text);
DROP TABLE mailroom.time_zones;
DROP TYPE mailroom.cron_spec;

COMMIT;
