-- Revert mailroom:attempts_successful_idx_dropped from pg

BEGIN;

CREATE INDEX attempts_successful_idx ON mailroom.attempts (message_id) WHERE reported = 'sent';

COMMIT;
