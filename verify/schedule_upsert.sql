-- Verify mailroom:schedule_upsert on pg

BEGIN;

SELECT 1/has_function_privilege('mailroom_app',
  'mailroom.schedule_upsert(text, text, text, text, text, jsonb, boolean, time, time, text, integer, text, text, text)', 'execute')::int;
SELECT 1/has_function_privilege('mailroom_app', 'mailroom.schedule_set_active(text, boolean)', 'execute')::int;
SELECT 1/(NOT has_function_privilege('mailroom_app',
  'mailroom._schedule_upsert(text, text, text, text, text, jsonb, boolean, time, time, text, integer, text, text, text, timestamptz)', 'execute'))::int;
SELECT 1/(NOT has_function_privilege('mailroom_app', 'mailroom._schedule_set_active(text, boolean, timestamptz)', 'execute'))::int;
SELECT 'mailroom._schedule_retime(mailroom.schedules, mailroom.schedules, timestamptz)'::regprocedure;
DO $$
BEGIN
  ASSERT mailroom._schedule_delivery_key(7, '2026-03-30 06:00Z', 'Europe/Berlin', 'email')
         = 'schedule:7:2026-03-30T08:00:email', '_schedule_delivery_key is wrong';
  ASSERT (SELECT prosrc FROM pg_proc
          WHERE oid = 'mailroom._schedule_upsert(text, text, text, text, text, jsonb, boolean, time, time, text, integer, text, text, text, timestamptz)'::regprocedure)
         LIKE '%mailroom: recipient_id:%', 'schedule_upsert does not check recipient_id';
  ASSERT (SELECT prosrc FROM pg_proc
          WHERE oid = 'mailroom._schedule_retime(mailroom.schedules, mailroom.schedules, timestamptz)'::regprocedure)
         LIKE '%mailroom.queue%', '_schedule_retime does not work on the queue';
END
$$;

ROLLBACK;
