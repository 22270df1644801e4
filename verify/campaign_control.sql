-- Verify mailroom:campaign_control on pg

BEGIN;

SELECT 1/has_function_privilege('mailroom_app', 'mailroom.pause_campaign(bigint)', 'execute')::int;
SELECT 1/has_function_privilege('mailroom_app', 'mailroom.resume_campaign(bigint)', 'execute')::int;
SELECT 1/has_function_privilege('mailroom_app', 'mailroom.cancel_campaign(bigint)', 'execute')::int;
SELECT 1/has_function_privilege('mailroom_operator', 'mailroom.finish_campaigns()', 'execute')::int;
SELECT 'mailroom._campaign_lock(bigint)'::regprocedure;
SELECT 1/has_function_privilege('mailroom_app', 'mailroom._campaign_eta(text, bigint, bigint, bigint, bigint, bigint, timestamptz, timestamptz)', 'execute')::int;
SELECT campaign_id, name, status, total, queued, paused, sending, sent, failed, cancelled, review,
       sent_last_minute, send_rate_per_second, oldest_queued_age, eta, due, waiting, next_due_at, eta_note
FROM mailroom.campaign_progress WHERE false;
DO $$
BEGIN
  ASSERT has_table_privilege('mailroom_operator', 'mailroom.campaign_progress', 'select'),
    'mailroom_operator cannot read campaign_progress';
  ASSERT pg_catalog.to_regprocedure('mailroom.pause_campaign(bigint, timestamptz)') IS NULL,
    'pause_campaign still takes p_now';
  ASSERT (SELECT pg_catalog.pg_get_viewdef('mailroom.campaign_progress'::regclass)) NOT LIKE '%messages%',
    'campaign_progress reads the messages view';
  ASSERT (SELECT prosrc LIKE '%FOR UPDATE SKIP LOCKED%' FROM pg_proc
          WHERE oid = 'mailroom.finish_campaigns()'::regprocedure),
    'finish_campaigns judges backlog and live mail without locking the campaign first';
  ASSERT (SELECT bool_and(prosrc LIKE '%WHERE q.campaign_id = p_campaign AND q.status = %') FROM pg_proc
          WHERE oid IN ('mailroom.pause_campaign(bigint)'::regprocedure, 'mailroom.resume_campaign(bigint)'::regprocedure)),
    'pause_campaign or resume_campaign finds the live mail through the campaign''s contents (all its history)';
END
$$;

ROLLBACK;
