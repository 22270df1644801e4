-- Verify mailroom:console_reads on pg

BEGIN;

SELECT has_function_privilege('mailroom_operator', 'mailroom.throughput(interval, interval)', 'execute'),
       has_function_privilege('mailroom_operator', 'mailroom.send_rate_usage()', 'execute'),
       has_function_privilege('mailroom_operator', 'mailroom.failures_by_sender(interval)', 'execute'),
       has_function_privilege('mailroom_operator', 'mailroom.overdue_counts(interval)', 'execute'),
       has_function_privilege('mailroom_operator', 'mailroom.suppression_search(text, integer)', 'execute'),
       has_function_privilege('mailroom_operator', 'mailroom.schedule_list(integer)', 'execute'),
       has_function_privilege('mailroom_operator', 'mailroom.find_messages(text, integer)', 'execute'),
       has_function_privilege('mailroom_operator', 'mailroom.campaign_summaries(integer)', 'execute'),
       has_function_privilege('mailroom._throughput(interval, interval, timestamptz)', 'execute');

ROLLBACK;
