-- Deploy mailroom:view_overdue to pg
-- requires: view_overdue@v0.3.0
-- requires: split_messages

-- v0.4: due, unclaimed mail is a queued row of the hot queue; its key,
-- address, origin and age come from contents (one primary-key probe per
-- row shown). History is not read at all, so the view costs the same with
-- 5,000,000 finished mails as with none. split_messages dropped the v0.3
-- view (it read the messages table); this creates it again, same columns.

BEGIN;

-- Views run with their owner's rights on tables, so operators need no table
-- grants. security_barrier keeps an operator's own functions in a WHERE from
-- seeing rows the view filters out.
CREATE VIEW mailroom.overdue WITH (security_barrier) AS
SELECT q.id,
       c.delivery_key,
       q.sender,
       c.to_address,
       q.priority,
       q.run_at,
       now() - q.run_at AS overdue_for,
       q.attempts,
       q.max_attempts,
       q.status_reason,
       q.last_error,
       c.campaign_id,
       c.schedule_id,
       c.created_at
FROM (SELECT * FROM mailroom.queue q
      WHERE q.status = 'queued' AND q.run_at <= now()
      ORDER BY q.run_at, q.id) q
-- One primary-key probe of contents per row shown (OFFSET 0 keeps the
-- subquery from being flattened into a join): planned as a join, a large
-- backlog made the planner hash all of contents - the whole history - for
-- `LIMIT 50` (0.5 s with 1,000,000 mails of history; 47 ms this way).
CROSS JOIN LATERAL (SELECT c.delivery_key, c.to_address, c.campaign_id, c.schedule_id, c.created_at
                    FROM mailroom.contents c WHERE c.id = q.id OFFSET 0) c
ORDER BY q.run_at, q.id;
ALTER VIEW mailroom.overdue OWNER TO mailroom_owner;
REVOKE ALL ON mailroom.overdue FROM PUBLIC;
GRANT SELECT ON mailroom.overdue TO mailroom_operator;
COMMENT ON VIEW mailroom.overdue IS
  'Queued mail that is due (run_at has passed) but not yet claimed, oldest first: the hot queue joined to contents. Should drain within seconds while runners are up.';
COMMENT ON COLUMN mailroom.overdue.overdue_for IS
  'How long the mail has been due: now() - run_at.';

COMMIT;
