-- Revert mailroom:message_guard_operator from pg
-- Nothing to undo: the deploy created nothing. The v0.3 trigger belongs on
-- the messages table, which split_messages' revert (later in the revert)
-- restores together with this trigger; a revert never creates a trigger on
-- the read-model view mailroom.messages.

BEGIN;

COMMIT;
