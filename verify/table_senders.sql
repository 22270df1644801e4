-- Verify mailroom:table_senders on pg

BEGIN;

SELECT name, max_per_second, max_per_minute, updated_at FROM mailroom.senders WHERE false;
DO $$
BEGIN
  ASSERT pg_catalog.has_function_privilege('mailroom_operator', 'mailroom.set_sender_limits(text, integer, integer)', 'execute'),
         'mailroom_operator cannot execute set_sender_limits';
END
$$;

ROLLBACK;
