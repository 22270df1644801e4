-- Verify mailroom:view_repeated_attempts on pg

BEGIN;

SELECT recipient, recipient_id, messages, repeated_messages, attempts, most_attempts, unsuccessful,
       successful, duplicates, last_claimed_at, last_outcome, last_smtp_reply
FROM mailroom.repeated_attempts WHERE false;
SELECT 1/has_table_privilege('mailroom_operator', 'mailroom.repeated_attempts', 'select')::integer;
DO $$
BEGIN
  ASSERT pg_get_viewdef('mailroom.repeated_attempts'::regclass) LIKE '%''sending''%',
    'repeated_attempts does not count the attempt in flight';
  ASSERT NOT EXISTS (SELECT FROM pg_depend d JOIN pg_rewrite r ON r.oid = d.objid
                     WHERE r.ev_class = 'mailroom.repeated_attempts'::regclass AND d.refobjid = 'mailroom.messages'::regclass),
    'repeated_attempts reads the messages read model instead of the tables';
END
$$;

ROLLBACK;
