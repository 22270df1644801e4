-- Deploy mailroom:table_queue to pg
-- requires: table_contents

-- The hot queue: one narrow row per live mail (due, leased, paused, waiting
-- for review) and nothing else. A mail's row is deleted in the transaction
-- that records its final outcome, so this table follows the backlog, never
-- the history, and its two partial indexes stay small. Content is joined in
-- from mailroom.contents only for the rows a claim hands out.
--
-- No foreign key to contents: both rows are written by the same statement
-- and the check would cost every enqueue and claim an index probe;
-- mailroom.integrity_problems() finds an orphan if one ever appears.

BEGIN;

CREATE TABLE mailroom.queue (
  id            bigint PRIMARY KEY,
  status        text NOT NULL DEFAULT 'queued',
  status_reason text,
  priority      smallint NOT NULL DEFAULT 0,
  run_at        timestamptz NOT NULL DEFAULT now(),
  sender        text NOT NULL,
  -- The campaign's, copied from contents: a report counts its delivered mail
  -- against campaign and sender (the circuit breaker) from the rows it
  -- deletes, with no lookup (mailroom.integrity_problems() checks the copy).
  campaign_id   bigint,
  attempts      integer NOT NULL DEFAULT 0,
  max_attempts  integer NOT NULL,
  on_ambiguous  text NOT NULL,
  lease_token   uuid,
  leased_until  timestamptz,
  worker        text,
  claimed_at    timestamptz,
  last_error    text,
  updated_at    timestamptz NOT NULL DEFAULT now(),
  -- The one check this table keeps: a claim writes every row it leases and
  -- pays each check on each. The values' domains (status, priority,
  -- attempts, on_ambiguous) are the writers' constants or copied from
  -- contents, which checks them when the mail is stored;
  -- mailroom.integrity_problems() reports a row outside them
  -- (queue_value_unknown). Four more checks cost a claim of 50 about 2 %.
  CONSTRAINT queue_lease_only_while_sending
    CHECK ((status = 'sending') = (lease_token IS NOT NULL AND leased_until IS NOT NULL))
-- Half of each page left free: a claim writes a new version of every row
-- it leases (status and lease are in the partial indexes' predicates, so
-- the update cannot be HOT), and with room for that version on the row's
-- own page the update stays there. At 70 a quarter of the claim's updates
-- went to another page, each with an extra lock record and a second buffer;
-- at 50, claim_batch and mark_outcomes each ran about 15 % faster
-- (bench/mailroom_sql.pgbench, one client). The table holds only live mail,
-- so the price is pages for the backlog, not for the history.
) WITH (fillfactor = 50);
ALTER TABLE mailroom.queue OWNER TO mailroom_owner;

CREATE INDEX queue_claim_idx ON mailroom.queue (priority DESC, run_at, id) WHERE status = 'queued';
CREATE INDEX queue_reclaim_idx ON mailroom.queue (leased_until) WHERE status = 'sending';

-- Every row is updated about twice and deleted once: vacuum often, in small
-- bites, so claims never wade through dead index entries.
ALTER TABLE mailroom.queue SET (
  autovacuum_vacuum_scale_factor = 0, autovacuum_vacuum_threshold = 5000,
  autovacuum_vacuum_insert_scale_factor = 0, autovacuum_vacuum_insert_threshold = 10000,
  autovacuum_analyze_scale_factor = 0.02, autovacuum_vacuum_cost_limit = 2000);

COMMENT ON TABLE mailroom.queue IS
  'The hot queue: live mail only (queued, sending, paused, review). A row leaves in the transaction that finishes its mail; content is in mailroom.contents (same id).';
COMMENT ON COLUMN mailroom.queue.status IS
  'queued (due once run_at passes), sending (leased), paused (its campaign is paused), review (delivery could not be proven; a human decides).';
COMMENT ON COLUMN mailroom.queue.run_at IS
  'Earliest moment the mail may be claimed; a retry or a send window moves it later.';
COMMENT ON COLUMN mailroom.queue.attempts IS
  'Claims so far (a released claim does not count).';
COMMENT ON COLUMN mailroom.queue.lease_token IS
  'Token of the current claim; outcomes carrying another token change nothing but the ledger.';

COMMIT;
