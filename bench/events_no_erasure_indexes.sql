-- bench/_sql_ab.py PRE_B file: the event feed without forget's two indexes (docs/events.md).
DROP INDEX mailroom.events_message_idx; DROP INDEX mailroom.events_address_idx;
