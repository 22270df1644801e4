-- Verify mailroom:view_review_queue on pg

BEGIN;

SELECT id, delivery_key, sender, to_address, subject, template_key, campaign_id, status_reason,
       last_error, attempts, in_review_since, waiting_for, last_worker, last_claimed_at,
       last_reported, last_outcome, last_smtp_reply, reported_sent
FROM mailroom.review_queue WHERE false;
SELECT 1/has_table_privilege('mailroom_operator', 'mailroom.review_queue', 'select')::integer;
DO $$
BEGIN
  ASSERT NOT EXISTS (SELECT FROM pg_depend d JOIN pg_rewrite r ON r.oid = d.objid
                     WHERE r.ev_class = 'mailroom.review_queue'::regclass AND d.refobjid = 'mailroom.messages'::regclass),
    'review_queue reads the messages read model instead of the queue';
END
$$;

ROLLBACK;
