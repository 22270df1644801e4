-- Revert mailroom:console_reads from pg

BEGIN;

DROP FUNCTION mailroom.campaign_summaries(integer);
DROP FUNCTION mailroom.find_messages(text, integer);
DROP FUNCTION mailroom.schedule_list(integer);
DROP FUNCTION mailroom.suppression_search(text, integer);
DROP FUNCTION mailroom.send_rate_usage();
DROP FUNCTION mailroom.overdue_counts(interval);
DROP FUNCTION mailroom.failures_by_sender(interval);
DROP FUNCTION mailroom.throughput(interval, interval);
DROP FUNCTION mailroom._throughput(interval, interval, timestamptz);

COMMIT;
