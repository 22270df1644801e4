-- Verify mailroom:schedule_upsert on pg

BEGIN;

SELECT has_function_privilege('mailroom_app',
  'mailroom.schedule_upsert(text, text, text, text, text, jsonb, boolean, time, time, text, integer, text, text, timestamptz)', 'execute');
SELECT has_function_privilege('mailroom_app', 'mailroom.schedule_set_active(text, boolean, timestamptz)', 'execute');
SELECT has_function_privilege('mailroom._schedule_retime(mailroom.schedules, mailroom.schedules, timestamptz)', 'execute');
DO $$
BEGIN
  ASSERT mailroom._schedule_delivery_key(7, '2026-03-30 06:00Z', 'Europe/Berlin', 'email')
         = 'schedule:7:2026-03-30T08:00:email', '_schedule_delivery_key is wrong';
  ASSERT (SELECT prosrc FROM pg_proc
          WHERE oid = 'mailroom.schedule_upsert(text, text, text, text, text, jsonb, boolean, time, time, text, integer, text, text, timestamptz)'::regprocedure)
         LIKE '%mailroom: recipient_id:%', 'schedule_upsert does not check recipient_id';
END
$$;

ROLLBACK;
