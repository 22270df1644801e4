-- Deploy mailroom:table_campaign_backlog to pg
-- requires: table_contents
-- requires: table_campaigns

-- A campaign's queue rows are made lazily, a chunk at a time, as runners
-- need them (listmonk walks a campaign's subscribers with a last-id cursor
-- the same way): enqueue_campaign writes each mail's contents row only, and
-- this row says what of the campaign is not queued yet. Why: a queue row
-- per mail at enqueue time cost a million-recipient campaign a second
-- B-tree pair (queue pk, queue_claim_idx) and a heap row for every mail,
-- written in the one transaction the caller waits for (bench/campaign_1m.py).
--
-- One row per campaign that may still have unqueued mail; no row means
-- every mail of the campaign has its queue row or is finished. The
-- functions are in deploy/campaign_chunks.sql. The row also keeps the count
-- of what is not queued yet, so that operators' "how much is queued" reads
-- (queue_stats, campaign_summaries) cost a row per campaign, not a count
-- of its index above the cursor.

BEGIN;

CREATE TABLE mailroom.campaign_backlog (
  campaign_id    bigint PRIMARY KEY REFERENCES mailroom.campaigns (id) ON DELETE CASCADE,
  queued_through bigint NOT NULL,
  chunk_first    bigint NOT NULL,
  chunk_middle   bigint NOT NULL,
  unqueued       bigint NOT NULL DEFAULT 0 CHECK (unqueued >= 0),
  not_before     timestamptz NOT NULL DEFAULT '-infinity',
  updated_at     timestamptz NOT NULL DEFAULT now()
);
ALTER TABLE mailroom.campaign_backlog OWNER TO mailroom_owner;

COMMENT ON TABLE mailroom.campaign_backlog IS
  'Per campaign with mail not queued yet: the cursor of its lazy queueing (deploy/campaign_chunks.sql). A campaign''s contents rows with id above queued_through have no queue row yet; no row = nothing left to queue.';
COMMENT ON COLUMN mailroom.campaign_backlog.queued_through IS
  'Every mail of the campaign with an id up to this one has its queue row or is finished; the next chunk starts above it.';
COMMENT ON COLUMN mailroom.campaign_backlog.chunk_first IS
  'The first id of the newest chunk.';
COMMENT ON COLUMN mailroom.campaign_backlog.chunk_middle IS
  'The middle id of the newest chunk: once no due queued mail of the campaign is left from chunk_first to here (claims take a chunk lowest id first), the next chunk is queued, half a chunk ahead of the drain.';
COMMENT ON COLUMN mailroom.campaign_backlog.unqueued IS
  'How many of the campaign''s mails above queued_through are not queued and not finished yet: raised by enqueue_campaign, lowered by each chunk and by an operator cancel of mail not queued yet, all under this row''s lock. queue_stats and campaign_summaries read it instead of counting a million index entries per read.';
COMMENT ON COLUMN mailroom.campaign_backlog.not_before IS
  'No chunk before this moment: the newest chunk had nothing due (send windows, send_at), so queueing more would only queue more waiting mail.';

COMMIT;
