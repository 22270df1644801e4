-- Deploy mailroom:view_overdue to pg
-- requires: table_messages

BEGIN;

-- Views run with their owner's rights on tables, so operators need no table
-- grants. security_barrier keeps an operator's own functions in a WHERE from
-- seeing rows the view filters out.
CREATE VIEW mailroom.overdue WITH (security_barrier) AS
SELECT m.id,
       m.delivery_key,
       m.sender,
       m.to_address,
       m.priority,
       m.run_at,
       now() - m.run_at AS overdue_for,
       m.attempts,
       m.max_attempts,
       m.status_reason,
       m.last_error,
       m.campaign_id,
       m.schedule_id,
       m.created_at
FROM mailroom.messages m
WHERE m.status = 'queued' AND m.run_at <= now()
ORDER BY m.run_at, m.id;
ALTER VIEW mailroom.overdue OWNER TO mailroom_owner;
REVOKE ALL ON mailroom.overdue FROM PUBLIC;
GRANT SELECT ON mailroom.overdue TO mailroom_operator;
COMMENT ON VIEW mailroom.overdue IS
  'Queued mail that is due (run_at has passed) but not yet claimed, oldest first. Should drain within seconds while runners are up.';
COMMENT ON COLUMN mailroom.overdue.overdue_for IS
  'How long the mail has been due: now() - run_at.';

COMMIT;
