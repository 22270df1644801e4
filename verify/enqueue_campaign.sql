-- Verify mailroom:enqueue_campaign on pg

BEGIN;

DO $$
BEGIN
  ASSERT has_function_privilege('mailroom_app',
    'mailroom.enqueue_campaign(text, text, text, integer, timestamptz, jsonb, text, time, time, text, jsonb, integer, text, text)', 'execute'),
    'mailroom_app cannot call enqueue_campaign';
  ASSERT NOT (SELECT prosecdef FROM pg_proc WHERE oid =
    'mailroom.enqueue_campaign(text, text, text, integer, timestamptz, jsonb, text, time, time, text, jsonb, integer, text, text)'::regprocedure),
    'enqueue_campaign must be SECURITY INVOKER';
  ASSERT has_function_privilege('mailroom_app',
    'mailroom._campaign_open(text, text, integer, timestamptz, jsonb, text, time, time, text, jsonb, integer, text, text)', 'execute'),
    'mailroom_app cannot call _campaign_open';
  ASSERT has_function_privilege('mailroom_app', 'mailroom._campaign_fill(bigint)', 'execute'),
    'mailroom_app cannot call _campaign_fill';
  ASSERT mailroom._address_ok('a@example.org') AND NOT mailroom._address_ok('a b@example.org')
         AND NOT mailroom._address_ok('root@localhost'),
    '_address_ok is wrong';
  ASSERT (SELECT prosrc FROM pg_proc WHERE oid = 'mailroom._campaign_fill(bigint)'::regprocedure)
           LIKE '%INSERT INTO mailroom.campaign_backlog%_campaign_queue_chunk%',
    '_campaign_fill does not hold the backlog row and queue the first chunk';
  ASSERT (SELECT prosrc FROM pg_proc WHERE oid =
    'mailroom.enqueue_campaign(text, text, text, integer, timestamptz, jsonb, text, time, time, text, jsonb, integer, text, text)'::regprocedure)
           LIKE '%OPERATOR(pg_catalog.=)%',
    'enqueue_campaign leaves its operators to the caller''s search_path';
  ASSERT pg_catalog.to_regprocedure('mailroom._campaign_fill(bigint, timestamptz)') IS NULL,
    'the p_now overload of _campaign_fill is still there';
  ASSERT (SELECT prosrc FROM pg_proc WHERE oid = 'mailroom._campaign_fill(bigint)'::regprocedure)
           LIKE '%INSERT INTO mailroom.campaign_mail_counts%',
    '_campaign_fill does not count the mails it wrote into campaign_mail_counts';
END
$$;

ROLLBACK;
