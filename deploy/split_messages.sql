-- Deploy mailroom:split_messages to pg
-- requires: table_queue
-- requires: table_contents

-- v0.4 splits the one wide messages table into mailroom.contents (written
-- once), mailroom.queue (live mail only) and the ledger mailroom.attempts,
-- whose row for the attempt or decision that finished a mail now says so
-- (finished_as). Existing mail moves, including mail leased at this moment:
-- its lease (token, worker, claim time, deadline) moves with it, so the
-- runner holding it reports into the new tables. mailroom.messages stays as a
-- read-only view with the old columns.
--
-- Until the reworked queue functions that follow in the plan are deployed
-- (seconds), calls of the v0.3 functions fail; runners keep their outcomes
-- and retry, applications see the error and retry their transaction.

BEGIN;

LOCK TABLE mailroom.messages IN ACCESS EXCLUSIVE MODE;
LOCK TABLE mailroom.attempts IN ACCESS EXCLUSIVE MODE;

-- The ledger: no longer tied to a table rows leave (integrity_problems()
-- checks it instead of a per-row foreign key check on every outcome), and
-- its finishing row records the final state.
ALTER TABLE mailroom.attempts
  DROP CONSTRAINT attempts_message_id_fkey,
  DROP CONSTRAINT attempts_outcome_valid,
  ADD CONSTRAINT attempts_outcome_valid
    CHECK (outcome IN ('sent', 'retry', 'failed', 'ambiguous', 'expired', 'stale', 'released', 'cancelled', 'resolved')),
  ADD COLUMN finished_as   text,
  ADD COLUMN status_reason text,
  ADD COLUMN last_error    text,
  ADD CONSTRAINT attempts_finished_as_valid CHECK (finished_as IN ('sent', 'failed', 'cancelled')),
  ADD CONSTRAINT attempts_finished_has_outcome CHECK (finished_as IS NULL OR outcome IS NOT NULL);

-- What the reworked functions and views replace; each is created again by
-- its own change later in the plan.
DROP VIEW mailroom.campaign_progress, mailroom.queue_stats, mailroom.overdue, mailroom.expired_leases,
          mailroom.repeated_attempts, mailroom.delivered_keys, mailroom.duplicate_deliveries,
          mailroom.review_queue;
ALTER TABLE mailroom.attempts DROP COLUMN delivery_key;

INSERT INTO mailroom.contents (
  id, delivery_key, sender, to_address, subject, body_text, body_html, template_key, template_vars,
  headers, priority, max_attempts, on_ambiguous, campaign_id, schedule_id, recipient_id, recipient_zone,
  stream, created_at)
SELECT id, delivery_key, sender, to_address, subject, body_text, body_html, template_key, template_vars,
       headers, priority, max_attempts, on_ambiguous, campaign_id, schedule_id, recipient_id, recipient_zone,
       -- v0.3 mail gets the stream v0.4 would have given it (see streams)
       CASE WHEN campaign_id IS NOT NULL OR schedule_id IS NOT NULL THEN 'broadcast' ELSE 'transactional' END,
       created_at
FROM mailroom.messages;
DO $$ BEGIN
  PERFORM pg_catalog.setval('mailroom.message_ids', coalesce((SELECT max(id) FROM mailroom.messages), 0) + 1, false);
END $$;

INSERT INTO mailroom.queue (
  id, status, status_reason, priority, run_at, sender, campaign_id, attempts, max_attempts, on_ambiguous,
  lease_token, leased_until, worker, claimed_at, last_error, updated_at)
SELECT id, status, status_reason, priority, run_at, sender, campaign_id, attempts, max_attempts, on_ambiguous,
       lease_token, leased_until, worker, claimed_at, last_error, updated_at
FROM mailroom.messages
WHERE status IN ('queued', 'sending', 'paused', 'review');

-- Rows a v0.2.0 claim opened: the live lease is on the queue row now and its
-- attempt is written when it ends; any other open row ended unnoticed.
DELETE FROM mailroom.attempts a
USING mailroom.messages m
WHERE a.outcome IS NULL AND m.id = a.message_id AND m.status = 'sending' AND a.lease_token = m.lease_token;
UPDATE mailroom.attempts a
SET outcome = 'expired', finished_at = coalesce(a.claimed_at, now())
WHERE a.outcome IS NULL;

-- Finished mail: its latest ledger row records the finish; mail that
-- finished without an attempt (cancelled, suppressed) gets a row of its own.
UPDATE mailroom.attempts a
SET finished_as = m.status, status_reason = m.status_reason, last_error = m.last_error
FROM mailroom.messages m
WHERE m.status IN ('sent', 'failed', 'cancelled')
  AND a.id = (SELECT max(l.id) FROM mailroom.attempts l WHERE l.message_id = m.id);
INSERT INTO mailroom.attempts (message_id, attempt, finished_at, outcome, finished_as, status_reason, last_error)
SELECT m.id, m.attempts, coalesce(m.sent_at, m.updated_at),
       CASE WHEN m.status = 'cancelled' THEN 'cancelled' ELSE 'resolved' END,
       m.status, m.status_reason, m.last_error
FROM mailroom.messages m
WHERE m.status IN ('sent', 'failed', 'cancelled')
  AND NOT EXISTS (SELECT FROM mailroom.attempts l WHERE l.message_id = m.id);

-- The ledger's key: one B-tree entry per row, which finds a mail's rows and
-- lets it finish once. finish_key is 0 on the row that finished the mail and
-- a number of the ledger's id sequence on every other row, so the primary
-- key (message_id, finish_key) holds at most one finishing row per mail and
-- any number of others. v0.3 kept three B-trees for that (the primary key on
-- id, (message_id, lease_token), and the finishing rows by message); a sent
-- mail's ledger row paid an insertion into each, about 8,000 instructions
-- apiece, a fifth of what claiming and reporting the mail cost the database
-- (bench/RESULTS.md). Writers of a row that does not finish its mail give it
-- nextval('mailroom.attempts_id_seq'); a row finished or unfinished later
-- changes its finish_key with its finished_as (attempts_finish_key_valid).
ALTER TABLE mailroom.attempts ADD COLUMN finish_key bigint NOT NULL DEFAULT 0;
UPDATE mailroom.attempts SET finish_key = id WHERE finished_as IS NULL;
ALTER TABLE mailroom.attempts
  DROP CONSTRAINT attempts_pkey,
  ADD CONSTRAINT attempts_pkey PRIMARY KEY (message_id, finish_key),
  ADD CONSTRAINT attempts_finish_key_valid CHECK ((finish_key = 0) = (finished_as IS NOT NULL));
DROP INDEX mailroom.attempts_message_idx;
COMMENT ON COLUMN mailroom.attempts.finish_key IS
  '0 on the row that finished the mail (finished_as set), a unique number on every other row: the primary key (message_id, finish_key) lets a mail finish once.';
COMMENT ON COLUMN mailroom.attempts.finished_as IS
  'Set on the one row that finished the mail: sent, failed or cancelled (the mail then has no row in mailroom.queue). NULL on attempts after which the mail stayed live.';
COMMENT ON COLUMN mailroom.attempts.status_reason IS
  'On the finishing row: why it ended so (suppressed, campaign_cancelled, max_attempts, …).';
COMMENT ON COLUMN mailroom.attempts.last_error IS
  'On the finishing row: the last delivery error the mail met, if any.';
COMMENT ON COLUMN mailroom.attempts.outcome IS
  'What the queue made of the attempt: sent, retry, failed, ambiguous, expired (lease ran out), stale (reported after the lease was lost), released (handed back unsent); cancelled and resolved are decisions without an attempt (a cancel, a review resolved by an operator).';

DROP TABLE mailroom.messages;

-- The old shape as a read model: one row per mail, live or finished. A mail
-- with neither a queue row nor a finishing row is campaign mail not queued
-- yet (deploy/campaign_chunks.sql): status queued, reason not_yet_queued,
-- no run_at (mailroom.integrity_problems() tells it from lost mail).
CREATE VIEW mailroom.messages WITH (security_barrier) AS
SELECT c.id, c.delivery_key,
       coalesce(q.status, f.finished_as, 'queued') AS status,
       CASE WHEN q.id IS NOT NULL THEN q.status_reason
            WHEN f.id IS NOT NULL THEN f.status_reason ELSE 'not_yet_queued' END AS status_reason,
       coalesce(q.priority, c.priority) AS priority,
       q.run_at, c.sender, c.to_address, c.to_domain, c.subject, c.body_text, c.body_html,
       c.template_key, c.template_vars, c.headers,
       coalesce(q.attempts, f.attempt) AS attempts,
       coalesce(q.max_attempts, c.max_attempts) AS max_attempts,
       coalesce(q.on_ambiguous, c.on_ambiguous) AS on_ambiguous,
       q.lease_token, q.leased_until, q.worker, q.claimed_at,
       c.campaign_id, c.schedule_id, c.recipient_id, c.recipient_zone,
       CASE WHEN q.id IS NOT NULL THEN q.last_error ELSE f.last_error END AS last_error,
       c.created_at,
       coalesce(q.updated_at, f.finished_at) AS updated_at,
       CASE WHEN f.finished_as = 'sent' THEN f.finished_at END AS sent_at,
       f.finished_at,
       c.stream
FROM mailroom.contents c
LEFT JOIN mailroom.queue q ON q.id = c.id
LEFT JOIN mailroom.attempts f ON f.message_id = c.id AND f.finished_as IS NOT NULL;
ALTER VIEW mailroom.messages OWNER TO mailroom_owner;
REVOKE ALL ON mailroom.messages FROM PUBLIC;
COMMENT ON VIEW mailroom.messages IS
  'Read model: every mail with its content (contents), its live state (queue) or how it finished (the finishing ledger row); campaign mail not queued yet shows as queued (status_reason not_yet_queued). Write through the mailroom functions.';

COMMIT;
