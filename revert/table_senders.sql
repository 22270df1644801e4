-- Revert mailroom:table_senders from pg

BEGIN;

DROP FUNCTION mailroom.set_sender_limits(text, integer, integer);
DROP FUNCTION mailroom._check_send_rate(integer, integer);
DROP TABLE mailroom.senders;

COMMIT;
