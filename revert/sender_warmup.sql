-- Revert mailroom:sender_warmup from pg

BEGIN;

DROP FUNCTION mailroom.sender_warmup_status();
DROP FUNCTION mailroom.clear_sender_warmup(text);
DROP FUNCTION mailroom.set_sender_warmup(text, integer[], date);
DROP FUNCTION mailroom._warmup_day(date, integer[], date, integer, date);
DROP FUNCTION mailroom.warmup_default_ramp();
DROP TABLE mailroom.sender_warmups;
DELETE FROM mailroom.settings WHERE key IN ('warmup_transactional_reserve', 'warmup_hold');

COMMIT;
