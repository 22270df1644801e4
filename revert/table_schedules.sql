-- Revert mailroom:table_schedules from pg

BEGIN;

DELETE FROM mailroom.settings WHERE key IN ('schedule_lookahead', 'schedule_batch', 'schedule_max_lateness');
ALTER TABLE mailroom.messages DROP CONSTRAINT messages_schedule_fk;
DROP TABLE mailroom.schedules;

COMMIT;
