-- Verify mailroom:campaign_control on pg

BEGIN;

SELECT has_function_privilege('mailroom_app', 'mailroom.pause_campaign(bigint, timestamptz)', 'execute');
SELECT has_function_privilege('mailroom_app', 'mailroom.resume_campaign(bigint, timestamptz)', 'execute');
SELECT has_function_privilege('mailroom_app', 'mailroom.cancel_campaign(bigint, timestamptz)', 'execute');
SELECT has_function_privilege('mailroom_operator', 'mailroom.finish_campaigns(timestamptz)', 'execute');
SELECT campaign_id, name, status, total, queued, paused, sending, sent, failed, cancelled, review,
       sent_last_minute, send_rate_per_second, oldest_queued_age, eta
FROM mailroom.campaign_progress WHERE false;
DO $$
BEGIN
  ASSERT has_table_privilege('mailroom_operator', 'mailroom.campaign_progress', 'select'),
    'mailroom_operator cannot read campaign_progress';
END
$$;

ROLLBACK;
