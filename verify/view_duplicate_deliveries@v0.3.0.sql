-- Verify mailroom:view_duplicate_deliveries on pg

BEGIN;

SELECT delivery_key, message_id, sender, to_address, status, successful_attempts, first_sent_at,
       certainty, unproven_attempts, last_sent_at, attempt_numbers, workers, reports
FROM mailroom.duplicate_deliveries WHERE false;
SELECT 1/has_table_privilege('mailroom_operator', 'mailroom.duplicate_deliveries', 'select')::integer;

SELECT 1/count(*) FROM pg_indexes WHERE schemaname = 'mailroom' AND indexname = 'attempts_doubtful_idx';

ROLLBACK;
