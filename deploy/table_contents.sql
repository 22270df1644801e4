-- Deploy mailroom:table_contents to pg
-- requires: table_campaigns
-- requires: table_schedules
-- requires: streams
-- requires: address_key_qualified


-- What a mail says and to whom: written once by enqueue, enqueue_campaign or
-- materialize_schedules and never updated. Everything that changes while the
-- mail is live (status, lease, attempts, run_at) is in mailroom.queue; what
-- became of it is in the ledger (mailroom.attempts). Keeping content out of
-- the hot table is what lets claims and outcomes write small rows.
--
-- No foreign keys to campaigns and schedules: only enqueue_campaign and
-- materialize_schedules write those ids, from the rows they have just read,
-- and nothing deletes a campaign or a schedule; the two checks cost a bulk
-- campaign 27 % of its insert (bench/campaign_1m.py).
-- mailroom.integrity_problems() reports an id without its row.

BEGIN;

CREATE SEQUENCE mailroom.message_ids AS bigint;
ALTER SEQUENCE mailroom.message_ids OWNER TO mailroom_owner;
COMMENT ON SEQUENCE mailroom.message_ids IS
  'Message ids: shared by mailroom.contents, mailroom.queue and the ledger (attempts.message_id).';

CREATE TABLE mailroom.contents (
  id             bigint NOT NULL DEFAULT nextval('mailroom.message_ids') PRIMARY KEY,
  delivery_key   text NOT NULL,
  sender         text NOT NULL DEFAULT 'default',
  to_address     text NOT NULL,
  -- what follows the last @ (NULL without one), lower-cased: the same value
  -- as lower(substring(to_address FROM '@([^@]*)$')), without a regular
  -- expression whose capture group cost ~4 us a row of every insert.
  to_domain      text GENERATED ALWAYS AS (
                   CASE WHEN strpos(to_address, '@') > 0 THEN lower(split_part(to_address, '@', -1)) END) STORED,
  -- The address as suppressions are keyed (mailroom._address_key): the
  -- claim's gate looks it up for every mail it hands out, and putting it
  -- together there cost each pick as much as the lookup did.
  address_key    text GENERATED ALWAYS AS (mailroom._address_key(to_address)) STORED,
  subject        text,
  body_text      text,
  body_html      text,
  template_key   text,
  template_vars  jsonb NOT NULL DEFAULT '{}',
  headers        jsonb NOT NULL DEFAULT '{}',
  priority       smallint NOT NULL DEFAULT 0,
  max_attempts   integer NOT NULL DEFAULT 5,
  on_ambiguous   text NOT NULL DEFAULT 'retry',
  campaign_id    bigint,
  schedule_id    bigint,
  recipient_id   text,
  recipient_zone text,
  -- no foreign key to streams, like campaigns and schedules above: every
  -- writer checks the name, and streams are never removed
  stream         text NOT NULL DEFAULT 'transactional',
  created_at     timestamptz NOT NULL DEFAULT now(),
  CONSTRAINT contents_delivery_key_unique UNIQUE (delivery_key),
  CONSTRAINT contents_priority_range CHECK (priority BETWEEN -100 AND 100),
  CONSTRAINT contents_max_attempts_range CHECK (max_attempts BETWEEN 1 AND 100),
  CONSTRAINT contents_on_ambiguous_valid CHECK (on_ambiguous IN ('retry', 'review')),
  CONSTRAINT contents_present
    CHECK (template_key IS NOT NULL OR (subject IS NOT NULL AND (body_text IS NOT NULL OR body_html IS NOT NULL))),
  CONSTRAINT contents_headers_object CHECK (jsonb_typeof(headers) = 'object'),
  CONSTRAINT contents_template_vars_object CHECK (jsonb_typeof(template_vars) = 'object'),
  CONSTRAINT contents_campaign_recipient_present CHECK (campaign_id IS NULL OR recipient_id IS NOT NULL)
);
ALTER TABLE mailroom.contents OWNER TO mailroom_owner;
ALTER SEQUENCE mailroom.message_ids OWNED BY mailroom.contents.id;

-- A campaign mails a recipient once: enqueue_campaign, the one writer of
-- campaign_id (split_messages moved v0.3's rows, keyed the same way since
-- v0.1), keys each of its mails 'campaign:<campaign_id>:<recipient_id>', so
-- two rows of one campaign with one recipient_id would have one delivery
-- key, which the unique delivery key refuses. So the index that finds a campaign's mail
-- (pause, resume, cancel, progress, integrity) need not be a second unique
-- index over (campaign_id, recipient_id) of the same fact: one on
-- campaign_id, whose bigint keys arrive in order, is cheaper to keep up
-- (bench/campaign_1m.py). A re-run finds known recipients by delivery key.
-- Without deduplication: a campaign's million equal keys would otherwise
-- make every filled leaf page go through a deduplication pass, rewritten
-- and logged; plain entries are appended at the right (heap TIDs order
-- equal keys). The index is larger (about 20 bytes an entry against a few
-- in posting lists), and enqueue_campaign of 1,000,000 ran 15 % faster
-- (24.8 s against 21.0 s, best of 2 in one A/B run).
-- The id is the second column because a campaign's queue rows are made
-- lazily, a chunk at a time in id order (deploy/campaign_chunks.sql): the
-- next chunk is the next range of this index, and what is still unqueued is
-- an index-only count of it. Within one enqueue_campaign the ids ascend, so
-- entries are still appended at the right.
CREATE INDEX contents_campaign_idx ON mailroom.contents (campaign_id, id) WITH (deduplicate_items = off)
  WHERE campaign_id IS NOT NULL;
CREATE INDEX contents_schedule_idx ON mailroom.contents (schedule_id) WHERE schedule_id IS NOT NULL;

-- Insert-only between prunes: vacuum keeps visibility maps fresh for
-- index-only scans, and after prune has retired 100,000 mails it makes their
-- space reusable, whatever the table's size.
ALTER TABLE mailroom.contents SET (
  autovacuum_vacuum_scale_factor = 0, autovacuum_vacuum_threshold = 100000,
  autovacuum_vacuum_insert_scale_factor = 0, autovacuum_vacuum_insert_threshold = 100000,
  autovacuum_analyze_scale_factor = 0.02);

COMMENT ON TABLE mailroom.contents IS
  'One row per logical mail: recipient, content and origin, written once and never updated. Live state is in mailroom.queue, outcomes in mailroom.attempts; mailroom.messages joins the three.';
COMMENT ON COLUMN mailroom.contents.delivery_key IS
  'Stable identity of the logical mail: enqueue is idempotent on it for as long as the row is kept (see prune), and the Message-ID derives from it.';
COMMENT ON COLUMN mailroom.contents.priority IS
  'Priority the mail was queued with; the live value is mailroom.queue.priority.';
COMMENT ON COLUMN mailroom.contents.to_domain IS
  'Lower-cased recipient domain, for per-domain send limits and reporting.';
COMMENT ON COLUMN mailroom.contents.address_key IS
  'The recipient as mailroom.suppressions are keyed (mailroom._address_key): the claim-time gate''s lookup key.';
COMMENT ON COLUMN mailroom.contents.recipient_zone IS
  'IANA zone of the recipient for campaign and schedule mail with a send window (NULL otherwise).';
COMMENT ON COLUMN mailroom.contents.stream IS
  'The mail''s stream (mailroom.streams): transactional by default for enqueue, broadcast for campaigns and schedules; the claim-time gate honours suppressions for it or for all streams.';
COMMENT ON COLUMN mailroom.contents.on_ambiguous IS
  'When delivery cannot be proven (lease expired, timeout after DATA): retry (may duplicate) or review (a human decides).';

COMMIT;
