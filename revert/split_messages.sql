-- Revert mailroom:split_messages from pg

-- Back to the v0.3 table: every mail returns to one mailroom.messages row
-- (live state from the queue, the end from its finishing ledger row), the
-- ledger loses what v0.4 added, and the triggers and views that were built on
-- the table are created again as v0.3 defined them (copied from their
-- deploy scripts of v0.3.0). The reverts of the reworked views ran before
-- this one and put their v0.3 definitions onto the read-model view; they go
-- first so that view can be dropped.

BEGIN;

LOCK TABLE mailroom.queue, mailroom.contents, mailroom.attempts IN ACCESS EXCLUSIVE MODE;

DROP VIEW IF EXISTS mailroom.campaign_progress, mailroom.queue_stats, mailroom.overdue, mailroom.expired_leases,
          mailroom.repeated_attempts, mailroom.delivered_keys, mailroom.duplicate_deliveries,
          mailroom.review_queue;
DROP VIEW mailroom.messages;

-- table_messages (v0.1.0)
CREATE TABLE mailroom.messages (
  id            bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
  delivery_key  text NOT NULL,
  status        text NOT NULL DEFAULT 'queued',
  status_reason text,
  priority      smallint NOT NULL DEFAULT 0,
  run_at        timestamptz NOT NULL DEFAULT now(),
  sender        text NOT NULL DEFAULT 'default',
  to_address    text NOT NULL,
  to_domain     text GENERATED ALWAYS AS (lower(substring(to_address FROM '@([^@]*)$'))) STORED,
  subject       text,
  body_text     text,
  body_html     text,
  template_key  text,
  template_vars jsonb NOT NULL DEFAULT '{}',
  headers       jsonb NOT NULL DEFAULT '{}',
  attempts      integer NOT NULL DEFAULT 0,
  max_attempts  integer NOT NULL DEFAULT 5,
  on_ambiguous  text NOT NULL DEFAULT 'retry',
  lease_token   uuid,
  leased_until  timestamptz,
  worker        text,
  claimed_at    timestamptz,
  campaign_id   bigint,
  schedule_id   bigint,
  recipient_id  text,
  last_error    text,
  created_at    timestamptz NOT NULL DEFAULT now(),
  updated_at    timestamptz NOT NULL DEFAULT now(),
  sent_at       timestamptz,
  CONSTRAINT messages_delivery_key_unique UNIQUE (delivery_key),
  CONSTRAINT messages_status_valid
    CHECK (status IN ('queued', 'sending', 'sent', 'failed', 'cancelled', 'review', 'paused')),
  CONSTRAINT messages_priority_range CHECK (priority BETWEEN -100 AND 100),
  CONSTRAINT messages_attempts_range CHECK (attempts >= 0 AND max_attempts BETWEEN 1 AND 100),
  CONSTRAINT messages_on_ambiguous_valid CHECK (on_ambiguous IN ('retry', 'review')),
  CONSTRAINT messages_content_present
    CHECK (template_key IS NOT NULL OR (subject IS NOT NULL AND (body_text IS NOT NULL OR body_html IS NOT NULL))),
  CONSTRAINT messages_lease_only_while_sending
    CHECK ((status = 'sending') = (lease_token IS NOT NULL AND leased_until IS NOT NULL)),
  CONSTRAINT messages_sent_at_only_when_sent CHECK ((status = 'sent') = (sent_at IS NOT NULL)),
  CONSTRAINT messages_headers_object CHECK (jsonb_typeof(headers) = 'object'),
  CONSTRAINT messages_template_vars_object CHECK (jsonb_typeof(template_vars) = 'object')
);
ALTER TABLE mailroom.messages OWNER TO mailroom_owner;

-- The hot paths only ever look at a small live subset; history (sent, failed,
-- cancelled) is in neither index, so millions of old rows never slow them.
CREATE INDEX messages_claim_idx ON mailroom.messages (priority DESC, run_at, id)
  WHERE status = 'queued';
CREATE INDEX messages_reclaim_idx ON mailroom.messages (leased_until)
  WHERE status = 'sending';
CREATE INDEX messages_campaign_idx ON mailroom.messages (campaign_id, status)
  WHERE campaign_id IS NOT NULL;
CREATE INDEX messages_schedule_idx ON mailroom.messages (schedule_id)
  WHERE schedule_id IS NOT NULL AND status IN ('queued', 'paused');
CREATE INDEX messages_to_address_idx ON mailroom.messages (mailroom._address_key(to_address))
  WHERE status IN ('queued', 'paused');

COMMENT ON TABLE mailroom.messages IS
  'The queue: one row per logical mail. Write through mailroom.enqueue, never directly.';
COMMENT ON COLUMN mailroom.messages.delivery_key IS
  'Stable identity of the logical mail: enqueue is idempotent on it and the Message-ID derives from it.';
COMMENT ON COLUMN mailroom.messages.status IS
  'queued (due once run_at passes), sending (leased), sent, failed, cancelled, review (ambiguous, needs a human), paused (campaign paused).';
COMMENT ON COLUMN mailroom.messages.run_at IS
  'Earliest moment the mail may be claimed; a retry is a queued row with a later run_at.';
COMMENT ON COLUMN mailroom.messages.to_domain IS
  'Lower-cased recipient domain, for per-domain send limits and reporting.';
COMMENT ON COLUMN mailroom.messages.attempts IS
  'Claims so far (a released claim does not count).';
COMMENT ON COLUMN mailroom.messages.on_ambiguous IS
  'When delivery cannot be proven (lease expired, timeout after DATA): retry (may duplicate) or review (a human decides).';
COMMENT ON COLUMN mailroom.messages.lease_token IS
  'Token of the current claim; outcomes carrying another token change nothing but the ledger.';

-- table_campaigns and table_schedules add to it
ALTER TABLE mailroom.messages ADD COLUMN recipient_zone text;
COMMENT ON COLUMN mailroom.messages.recipient_zone IS
  'IANA zone of the recipient for campaign and schedule mail with a send window (NULL otherwise).';
ALTER TABLE mailroom.messages
  ADD CONSTRAINT messages_campaign_fk FOREIGN KEY (campaign_id) REFERENCES mailroom.campaigns (id),
  ADD CONSTRAINT messages_campaign_recipient_present CHECK (campaign_id IS NULL OR recipient_id IS NOT NULL),
  ADD CONSTRAINT messages_schedule_fk FOREIGN KEY (schedule_id) REFERENCES mailroom.schedules (id);
CREATE UNIQUE INDEX messages_campaign_recipient_unique ON mailroom.messages (campaign_id, recipient_id)
  WHERE campaign_id IS NOT NULL;
COMMENT ON INDEX mailroom.messages_campaign_recipient_unique IS
  'UNIQUE (campaign_id, recipient_id): a campaign mails each recipient at most once.';

-- prune (v0.1.0)
CREATE INDEX messages_finished_idx ON mailroom.messages (updated_at)
  WHERE status IN ('sent', 'failed', 'cancelled');

-- queue_autovacuum
ALTER TABLE mailroom.messages SET (
  autovacuum_vacuum_scale_factor = 0, autovacuum_vacuum_threshold = 10000,
  autovacuum_vacuum_insert_scale_factor = 0, autovacuum_vacuum_insert_threshold = 10000,
  autovacuum_analyze_scale_factor = 0.02, autovacuum_vacuum_cost_limit = 2000);

INSERT INTO mailroom.messages (
  id, delivery_key, status, status_reason, priority, run_at, sender, to_address, subject, body_text,
  body_html, template_key, template_vars, headers, attempts, max_attempts, on_ambiguous, lease_token,
  leased_until, worker, claimed_at, campaign_id, schedule_id, recipient_id, recipient_zone, last_error,
  created_at, updated_at, sent_at)
OVERRIDING SYSTEM VALUE
SELECT c.id, c.delivery_key,
       coalesce(q.status, f.finished_as, 'failed'),
       CASE WHEN q.id IS NOT NULL THEN q.status_reason
            WHEN f.id IS NOT NULL THEN f.status_reason ELSE 'lost' END,
       coalesce(q.priority, c.priority), coalesce(q.run_at, f.finished_at, c.created_at),
       c.sender, c.to_address, c.subject, c.body_text, c.body_html, c.template_key, c.template_vars,
       c.headers, coalesce(q.attempts, f.attempt, 0), c.max_attempts, c.on_ambiguous,
       q.lease_token, q.leased_until, q.worker, q.claimed_at, c.campaign_id, c.schedule_id,
       c.recipient_id, c.recipient_zone,
       CASE WHEN q.id IS NOT NULL THEN q.last_error ELSE f.last_error END,
       c.created_at, coalesce(q.updated_at, f.finished_at, c.created_at),
       CASE WHEN q.id IS NULL AND f.finished_as = 'sent' THEN f.finished_at END
FROM mailroom.contents c
LEFT JOIN mailroom.queue q ON q.id = c.id
LEFT JOIN mailroom.attempts f ON f.message_id = c.id AND f.finished_as IS NOT NULL AND q.id IS NULL;
DO $$ BEGIN
  PERFORM pg_catalog.setval(pg_catalog.pg_get_serial_sequence('mailroom.messages', 'id'),
                            coalesce((SELECT max(id) FROM mailroom.messages), 0) + 1, false);
END $$;

-- The ledger as v0.3 had it: decisions without an attempt were message state.
DELETE FROM mailroom.attempts WHERE outcome IN ('cancelled', 'resolved');
DELETE FROM mailroom.attempts a WHERE NOT EXISTS (SELECT FROM mailroom.messages m WHERE m.id = a.message_id);
ALTER TABLE mailroom.attempts
  DROP CONSTRAINT attempts_pkey,
  DROP CONSTRAINT attempts_finish_key_valid,
  DROP COLUMN finish_key,
  ADD PRIMARY KEY (id);
CREATE INDEX attempts_message_idx ON mailroom.attempts (message_id, lease_token);
ALTER TABLE mailroom.attempts ADD COLUMN delivery_key text;
UPDATE mailroom.attempts a SET delivery_key = m.delivery_key FROM mailroom.messages m WHERE m.id = a.message_id;
ALTER TABLE mailroom.attempts
  ALTER COLUMN delivery_key SET NOT NULL,
  DROP CONSTRAINT attempts_finished_has_outcome,
  DROP CONSTRAINT attempts_finished_as_valid,
  DROP COLUMN finished_as,
  DROP COLUMN status_reason,
  DROP COLUMN last_error,
  DROP CONSTRAINT attempts_outcome_valid,
  ADD CONSTRAINT attempts_outcome_valid
    CHECK (outcome IN ('sent', 'retry', 'failed', 'ambiguous', 'expired', 'stale', 'released')),
  ADD CONSTRAINT attempts_message_id_fkey FOREIGN KEY (message_id) REFERENCES mailroom.messages (id) ON DELETE CASCADE;
COMMENT ON COLUMN mailroom.attempts.outcome IS
  'What the queue made of the attempt: sent, retry, failed, ambiguous, expired (lease ran out), stale (reported after the lease was lost), released (handed back unsent). NULL only on a row opened by a claim_batch before v0.3.0 whose lease has not ended.';

TRUNCATE mailroom.queue, mailroom.contents;

-- message_guard and message_guard_operator (v0.1.0)
CREATE TRIGGER messages_guard_requeue
  BEFORE UPDATE OF status ON mailroom.messages
  FOR EACH ROW
  WHEN (OLD.status = 'sending' AND NEW.status = 'queued'
        AND (NEW.campaign_id IS NOT NULL OR NEW.schedule_id IS NOT NULL))
  EXECUTE FUNCTION mailroom._message_guard();
COMMENT ON TRIGGER messages_guard_requeue ON mailroom.messages IS
  'Keeps a retried campaign/schedule mail from escaping a pause, cancel, deactivation or send window.';
CREATE TRIGGER messages_guard_operator_requeue
  BEFORE UPDATE OF status ON mailroom.messages
  FOR EACH ROW
  WHEN (OLD.status IN ('failed', 'review') AND NEW.status = 'queued'
        AND (NEW.campaign_id IS NOT NULL OR NEW.schedule_id IS NOT NULL))
  EXECUTE FUNCTION mailroom._message_guard();
COMMENT ON TRIGGER messages_guard_operator_requeue ON mailroom.messages IS
  'Keeps mail an operator retries (failed or review -> queued) from escaping a campaign pause or cancel, an inactive schedule or a send window.';

-- The views of v0.3.0 on the table
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
CREATE OR REPLACE VIEW mailroom.expired_leases WITH (security_barrier) AS
SELECT a.id AS attempt_id,
       m.id AS message_id,
       m.delivery_key,
       m.sender,
       m.to_address,
       m.worker,
       m.attempts AS attempt,
       m.claimed_at,
       m.leased_until AS expired_at,
       now() - m.leased_until AS expired_for,
       false AS reclaimed,
       m.on_ambiguous,
       m.status,
       CASE WHEN m.on_ambiguous = 'review' THEN 'review'
            WHEN m.attempts >= m.max_attempts THEN 'failed'
            ELSE 'queued' END AS next_status
FROM mailroom.messages m
LEFT JOIN mailroom.attempts a ON a.message_id = m.id AND a.lease_token = m.lease_token AND a.outcome IS NULL
WHERE m.status = 'sending' AND m.leased_until < now()
UNION ALL
SELECT a.id, a.message_id, a.delivery_key, m.sender, m.to_address, a.worker, a.attempt, a.claimed_at,
       a.finished_at, now() - a.finished_at, true, m.on_ambiguous, m.status, m.status
FROM mailroom.attempts a
JOIN mailroom.messages m ON m.id = a.message_id
WHERE a.outcome IN ('expired', 'stale');
COMMENT ON VIEW mailroom.expired_leases IS
  'Claims whose lease ran out: the runner died or hung, so whether the mail went out is unknown. reclaimed = false rows wait for mailroom.reclaim() (next_status says where they go; read from the message, which holds the lease, so attempt_id is NULL until reclaim writes the ledger row); reclaimed = true rows are the ledger''s history (status is where the message is now; an attempt whose runner reported after the expiry has outcome stale and expired_at = the report''s time).';
CREATE OR REPLACE VIEW mailroom.repeated_attempts WITH (security_barrier) AS
WITH per_message AS (
  SELECT substring(m.to_address FROM '^(.*)@[^@]*$') || '@' || m.to_domain AS recipient,
         m.id AS message_id,
         m.recipient_id,
         count(*) AS attempts,
         count(*) FILTER (WHERE a.outcome IN ('retry', 'failed', 'ambiguous', 'expired', 'stale')) AS unsuccessful,
         count(*) FILTER (WHERE a.reported = 'sent') AS successful,
         count(*) FILTER (WHERE a.duplicate) AS duplicates,
         max(a.claimed_at) AS last_claimed_at,
         (array_agg(a.outcome ORDER BY a.claimed_at DESC, a.id DESC))[1] AS last_outcome,
         (array_agg(concat_ws(' ', a.smtp_code, a.smtp_enhanced, a.smtp_text) ORDER BY a.claimed_at DESC, a.id DESC)
            FILTER (WHERE a.smtp_code IS NOT NULL OR a.smtp_text IS NOT NULL))[1] AS last_smtp_reply,
         max(a.claimed_at) FILTER (WHERE a.smtp_code IS NOT NULL OR a.smtp_text IS NOT NULL) AS last_smtp_at
  FROM mailroom.messages m
  JOIN (SELECT a.message_id, a.id, a.claimed_at, a.reported, a.outcome, a.duplicate,
               a.smtp_code, a.smtp_enhanced, a.smtp_text
        FROM mailroom.attempts a
        UNION ALL
        -- The attempt in flight: its ledger row is written when the lease ends.
        SELECT f.id, NULL, f.claimed_at, NULL, NULL, false, NULL, NULL, NULL
        FROM mailroom.messages f
        WHERE f.status = 'sending'
          AND NOT EXISTS (SELECT FROM mailroom.attempts o WHERE o.message_id = f.id AND o.lease_token = f.lease_token)
       ) a ON a.message_id = m.id
  WHERE a.outcome IS DISTINCT FROM 'released'
  GROUP BY 1, m.id, m.recipient_id
)
SELECT p.recipient,
       max(p.recipient_id) AS recipient_id,
       count(*) AS messages,
       count(*) FILTER (WHERE p.attempts > 1) AS repeated_messages,
       sum(p.attempts)::bigint AS attempts,
       max(p.attempts)::integer AS most_attempts,
       sum(p.unsuccessful)::bigint AS unsuccessful,
       sum(p.successful)::bigint AS successful,
       sum(p.duplicates)::bigint AS duplicates,
       max(p.last_claimed_at) AS last_claimed_at,
       (array_agg(p.last_outcome ORDER BY p.last_claimed_at DESC))[1] AS last_outcome,
       (array_agg(p.last_smtp_reply ORDER BY p.last_smtp_at DESC) FILTER (WHERE p.last_smtp_reply IS NOT NULL))[1] AS last_smtp_reply
FROM per_message p
GROUP BY p.recipient
HAVING max(p.attempts) > 1;
CREATE VIEW mailroom.delivered_keys WITH (security_barrier) AS
SELECT m.delivery_key,
       m.id AS message_id,
       m.status,
       m.status_reason,
       m.sender,
       m.to_address,
       m.sent_at,
       s.first_success_at,
       coalesce(s.successful_attempts, 0) AS successful_attempts,
       s.provider_ids
FROM mailroom.messages m
LEFT JOIN LATERAL (
  SELECT min(coalesce(a.reported_at, a.finished_at)) AS first_success_at,
         count(*) AS successful_attempts,
         array_agg(a.provider_id ORDER BY coalesce(a.reported_at, a.finished_at)) FILTER (WHERE a.provider_id IS NOT NULL) AS provider_ids
  FROM mailroom.attempts a
  WHERE a.message_id = m.id AND a.reported = 'sent'
) s ON true
WHERE m.status = 'sent'
   OR EXISTS (SELECT FROM mailroom.attempts a WHERE a.message_id = m.id AND a.reported = 'sent');
ALTER VIEW mailroom.delivered_keys OWNER TO mailroom_owner;
REVOKE ALL ON mailroom.delivered_keys FROM PUBLIC;
GRANT SELECT ON mailroom.delivered_keys TO mailroom_operator;
COMMENT ON VIEW mailroom.delivered_keys IS
  'Delivery keys that already went out: the message is sent, or a runner reported a successful send for it (even under a lost lease). Resending any of these duplicates the mail. Query it by delivery_key before a manual resend.';
COMMENT ON COLUMN mailroom.delivered_keys.successful_attempts IS
  'Successful sends in the ledger; 0 when an operator resolved a review as sent; more than 1 is a duplicate.';
-- Two kinds. confirmed: two runners each reported a successful send. possible:
-- one successful send after an attempt that ended unproven (its lease expired
-- with no report, or the runner reported a timeout after DATA) - the ledger
-- cannot know whether that earlier attempt reached the recipient, so it says
-- so instead of guessing. Both kinds are rare, and this partial index finds
-- their candidates without reading the rest of the ledger.
-- (attempts_doubtful_idx, created with this view in v0.1.0, stayed on the ledger.)

CREATE VIEW mailroom.duplicate_deliveries WITH (security_barrier) AS
SELECT a.delivery_key,
       a.message_id,
       m.sender,
       m.to_address,
       m.status,
       CASE WHEN count(*) FILTER (WHERE a.reported = 'sent') > 1 THEN 'confirmed' ELSE 'possible' END AS certainty,
       count(*) FILTER (WHERE a.reported = 'sent') AS successful_attempts,
       count(*) FILTER (WHERE a.reported = 'ambiguous' OR (a.reported IS NULL AND a.outcome = 'expired')) AS unproven_attempts,
       min(coalesce(a.reported_at, a.finished_at)) FILTER (WHERE a.reported = 'sent') AS first_sent_at,
       max(coalesce(a.reported_at, a.finished_at)) FILTER (WHERE a.reported = 'sent') AS last_sent_at,
       array_agg(a.attempt ORDER BY a.claimed_at, a.id) AS attempt_numbers,
       array_agg(a.worker ORDER BY a.claimed_at, a.id) AS workers,
       array_agg(coalesce(a.reported, '-') || '/' || coalesce(a.outcome, 'in flight') ORDER BY a.claimed_at, a.id) AS reports
FROM mailroom.attempts a
JOIN mailroom.messages m ON m.id = a.message_id
WHERE a.message_id IN (SELECT d.message_id FROM mailroom.attempts d
                       WHERE d.duplicate OR d.reported = 'ambiguous' OR (d.reported IS NULL AND d.outcome = 'expired'))
  AND a.outcome IS DISTINCT FROM 'released'
GROUP BY a.delivery_key, a.message_id, m.sender, m.to_address, m.status
HAVING count(*) FILTER (WHERE a.reported = 'sent') > 1
    OR (count(*) FILTER (WHERE a.reported = 'sent') = 1
        AND count(*) FILTER (WHERE a.reported = 'ambiguous' OR (a.reported IS NULL AND a.outcome = 'expired')) > 0);
ALTER VIEW mailroom.duplicate_deliveries OWNER TO mailroom_owner;
REVOKE ALL ON mailroom.duplicate_deliveries FROM PUBLIC;
GRANT SELECT ON mailroom.duplicate_deliveries TO mailroom_operator;
COMMENT ON VIEW mailroom.duplicate_deliveries IS
  'Delivery keys sent more than once (certainty = confirmed: more than one successful send in the ledger) or maybe more than once (possible: one successful send after an attempt whose fate is unknown - lease expired unreported, or timeout after DATA). Check a possible one downstream by its Message-ID.';
COMMENT ON COLUMN mailroom.duplicate_deliveries.certainty IS
  'confirmed: the recipient got it at least twice; possible: it may have (on_ambiguous = retry resent after an unproven attempt).';
COMMENT ON COLUMN mailroom.duplicate_deliveries.reports IS
  'Each attempt as reported/outcome in claim order, e.g. {-/expired,sent/sent}: what the runner said and what the queue made of it.';
CREATE VIEW mailroom.review_queue WITH (security_barrier) AS
SELECT m.id,
       m.delivery_key,
       m.sender,
       m.to_address,
       m.subject,
       m.template_key,
       m.campaign_id,
       m.status_reason,
       m.last_error,
       m.attempts,
       m.updated_at AS in_review_since,
       now() - m.updated_at AS waiting_for,
       l.worker AS last_worker,
       l.claimed_at AS last_claimed_at,
       l.reported AS last_reported,
       l.outcome AS last_outcome,
       nullif(concat_ws(' ', l.smtp_code, l.smtp_enhanced, l.smtp_text), '') AS last_smtp_reply,
       EXISTS (SELECT FROM mailroom.attempts s WHERE s.message_id = m.id AND s.reported = 'sent') AS reported_sent
FROM mailroom.messages m
LEFT JOIN LATERAL (
  SELECT a.* FROM mailroom.attempts a
  WHERE a.message_id = m.id
  ORDER BY a.claimed_at DESC, a.id DESC
  LIMIT 1
) l ON true
WHERE m.status = 'review'
ORDER BY m.updated_at, m.id;
ALTER VIEW mailroom.review_queue OWNER TO mailroom_owner;
REVOKE ALL ON mailroom.review_queue FROM PUBLIC;
GRANT SELECT ON mailroom.review_queue TO mailroom_operator;
COMMENT ON VIEW mailroom.review_queue IS
  'Mail whose delivery could not be proven (lease expired or a timeout after DATA) under on_ambiguous = review. Not sent again until an operator calls mailroom.resolve_review(id, sent | retry | cancel).';
COMMENT ON COLUMN mailroom.review_queue.last_outcome IS
  'The last ledger row: expired (runner died or hung) or ambiguous (the runner reported a timeout after DATA).';
COMMENT ON COLUMN mailroom.review_queue.reported_sent IS
  'A runner reported the mail as sent (normally such a late report settles the review by itself).';

CREATE VIEW mailroom.queue_stats WITH (security_barrier) AS
WITH cfg AS (
  SELECT coalesce((SELECT value::interval FROM mailroom.settings WHERE key = 'lease_warning_after'),
                  interval '5 minutes') AS warn_after
),
tx AS (
  SELECT t.*,
         coalesce('pid ' || t.pid, 'prepared ' || t.prepared_gid) || coalesce(' ' || t.usename, '')
           || coalesce(' ' || nullif(t.application_name, ''), '') || coalesce(' ' || t.state, '') AS who
  FROM mailroom.open_transactions() t
),
-- What holds the xmin horizon back: old transactions with a snapshot or a
-- transaction id, and replication slots no standby or consumer is attached
-- to (an active slot moves with its standby; an inactive one never does).
holders AS (
  SELECT t.who, t.age, t.horizon_xid_age
  FROM tx t
  WHERE t.kind IN ('transaction', 'prepared') AND t.pins_horizon AND t.age > (SELECT warn_after FROM cfg)
  UNION ALL
  SELECT format('replication slot %s (%s, inactive)', s.slot_name, s.slot_type), NULL::interval,
         pg_catalog.age(s.xmin)
  FROM pg_catalog.pg_replication_slots s
  WHERE s.xmin IS NOT NULL AND NOT s.active
),
stats AS (
  SELECT 'queue'::text AS kind,
         m.sender,
         m.status,
         count(*) AS messages,
         count(*) FILTER (WHERE m.status = 'queued' AND m.run_at <= now()) AS due,
         now() - min(m.created_at) AS oldest_age,
         now() - min(m.run_at) FILTER (WHERE m.status = 'queued' AND m.run_at <= now()) AS oldest_due_age,
         NULL::text AS warning,
         NULL::text AS detail
  FROM mailroom.messages m
  GROUP BY m.sender, m.status
),
warnings AS (
  SELECT 'warning'::text, NULL::text, NULL::text, count(*), NULL::bigint, max(h.age), NULL::interval,
         'xmin_horizon',
         format('%s holder(s) pin the xmin horizon (transactions: for longer than lease_warning_after, %s), the oldest %s transactions back: %s%s. Vacuum cannot remove row versions that died after it, every claim and outcome leaves one in messages, and the queue bloats; end it: pg_terminate_backend(pid), ROLLBACK PREPARED ''gid'', or pg_drop_replication_slot(''name'') for a slot nothing uses (see mailroom.open_transactions())',
                count(*), (SELECT warn_after FROM cfg), max(h.horizon_xid_age),
                (array_agg(h.who ORDER BY h.horizon_xid_age DESC NULLS LAST, h.age DESC NULLS LAST))[1],
                coalesce(', open for ' || date_trunc('second',
                  (array_agg(h.age ORDER BY h.horizon_xid_age DESC NULLS LAST, h.age DESC NULLS LAST))[1]), ''))
  FROM holders h
  HAVING count(*) > 0
  UNION ALL
  SELECT 'warning', NULL, NULL, count(*), NULL, max(t.age), NULL,
         'long_transaction',
         format('%s transaction(s) open longer than lease_warning_after (%s), the oldest for %s (%s): it holds no snapshot and no transaction id, so vacuum is not held back, but its locks stay held and its connection taken; finish or end it (see mailroom.open_transactions())',
                count(*), (SELECT warn_after FROM cfg), date_trunc('second', max(t.age)),
                (array_agg(t.who ORDER BY t.age DESC))[1])
  FROM tx t
  WHERE t.kind = 'transaction' AND NOT t.pins_horizon AND t.age > (SELECT warn_after FROM cfg)
  HAVING count(*) > 0
  UNION ALL
  SELECT 'warning', NULL, NULL, count(*), NULL, NULL, NULL,
         'sessions_hidden',
         format('%s session(s) of other roles are invisible to mailroom_owner, so long transactions may go unnoticed: GRANT pg_read_all_stats TO mailroom_owner', count(*))
  FROM tx t
  WHERE t.kind = 'hidden'
  HAVING count(*) > 0
  UNION ALL
  SELECT 'warning', NULL, NULL, count(*), NULL, now() - min(m.leased_until), NULL,
         'expired_leases',
         format('%s lease(s) expired and not yet reclaimed, the oldest %s ago: reclaim is not running (no pg_cron job and no runner calling it?); run SELECT mailroom.reclaim()',
                count(*), date_trunc('second', now() - min(m.leased_until)))
  FROM mailroom.messages m
  WHERE m.status = 'sending' AND m.leased_until < now() - interval '1 minute'
  HAVING count(*) > 0
  UNION ALL
  SELECT 'warning', NULL, 'review', count(*), NULL, now() - min(m.updated_at), NULL,
         'review_waiting',
         format('%s mail(s) wait for an operator decision, the oldest for %s: see mailroom.review_queue and mailroom.resolve_review()',
                count(*), date_trunc('second', now() - min(m.updated_at)))
  FROM mailroom.messages m
  WHERE m.status = 'review'
  HAVING count(*) > 0
)
SELECT s.kind, s.sender, s.status, s.messages, s.due, s.oldest_age, s.oldest_due_age, s.warning, s.detail
FROM (SELECT * FROM stats UNION ALL SELECT * FROM warnings) s
ORDER BY s.kind, s.sender, s.status, s.warning;
ALTER VIEW mailroom.queue_stats OWNER TO mailroom_owner;
REVOKE ALL ON mailroom.queue_stats FROM PUBLIC;
GRANT SELECT ON mailroom.queue_stats TO mailroom_operator;
COMMENT ON VIEW mailroom.queue_stats IS
  'Queue depth and age per sender and status (kind = queue), then warnings (kind = warning): xmin_horizon (something pins vacuum: the queue will bloat), long_transaction (open long, pins nothing, holds its locks), sessions_hidden, expired_leases (reclaim not running), review_waiting.';
COMMENT ON COLUMN mailroom.queue_stats.oldest_age IS
  'Queue rows: now() - the oldest created_at in the group. Warning rows: age of the oldest offending item (xmin_horizon: of the oldest transaction among the holders; NULL when only replication slots hold it).';
COMMENT ON COLUMN mailroom.queue_stats.oldest_due_age IS
  'Queued rows only: how long the oldest due mail has waited past its run_at (the overdue age).';
COMMENT ON COLUMN mailroom.queue_stats.warning IS
  'Warning code on warning rows (xmin_horizon, long_transaction, sessions_hidden, expired_leases, review_waiting); detail says what it means and what to do.';

CREATE VIEW mailroom.campaign_progress AS
SELECT c.id AS campaign_id,
       c.name,
       CASE WHEN c.status = 'active' AND s.queued + s.sending + s.paused = 0 THEN 'done' ELSE c.status END AS status,
       c.priority,
       c.send_at,
       s.total, s.queued, s.paused, s.sending, s.sent, s.failed, s.cancelled, s.review,
       s.sent_last_minute,
       round(s.sent_last_minute / 60.0, 2) AS send_rate_per_second,
       now() - s.oldest_due AS oldest_queued_age,
       CASE WHEN s.sent_last_minute > 0 AND c.status = 'active'
            THEN (s.queued + s.sending) * interval '60 seconds' / s.sent_last_minute END AS eta,
       c.created_at,
       c.finished_at
FROM mailroom.campaigns c
CROSS JOIN LATERAL (
  SELECT count(*) AS total,
         count(*) FILTER (WHERE m.status = 'queued') AS queued,
         count(*) FILTER (WHERE m.status = 'paused') AS paused,
         count(*) FILTER (WHERE m.status = 'sending') AS sending,
         count(*) FILTER (WHERE m.status = 'sent') AS sent,
         count(*) FILTER (WHERE m.status = 'failed') AS failed,
         count(*) FILTER (WHERE m.status = 'cancelled') AS cancelled,
         count(*) FILTER (WHERE m.status = 'review') AS review,
         count(*) FILTER (WHERE m.status = 'sent' AND m.sent_at > now() - interval '1 minute') AS sent_last_minute,
         min(m.run_at) FILTER (WHERE m.status = 'queued' AND m.run_at <= now()) AS oldest_due
  FROM mailroom.messages m
  WHERE m.campaign_id = c.id
) s;
ALTER VIEW mailroom.campaign_progress OWNER TO mailroom_owner;
GRANT SELECT ON mailroom.campaign_progress TO mailroom_operator, mailroom_app;
COMMENT ON VIEW mailroom.campaign_progress IS
  'Per campaign: counts per message status, mail sent in the last minute and the rate per second, age of the oldest due queued mail, ETA at the current rate; status done as soon as nothing is left to send.';

COMMIT;
