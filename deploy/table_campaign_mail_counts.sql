-- Deploy mailroom:table_campaign_mail_counts to pg
-- requires: table_campaigns
-- requires: table_contents

-- How many mails (contents rows) each campaign holds. campaign_summaries
-- counted them on every read with an index-only scan of
-- contents_campaign_idx: O(the campaign's size, finished mail too), 20 ms
-- for a campaign of 205,000 (issue 32, item 7). enqueue_campaign is the one
-- writer of a campaign's contents and adds what each run wrote, while it
-- holds the campaign's backlog row (so runs of one campaign take turns
-- here too): one row written per run, nothing per mail. A separate table,
-- not a column of campaigns: _campaign_fill holds the campaign row FOR
-- SHARE, and two runs updating it would deadlock.

BEGIN;

CREATE TABLE mailroom.campaign_mail_counts (
  campaign_id bigint PRIMARY KEY REFERENCES mailroom.campaigns (id) ON DELETE CASCADE,
  mails       bigint NOT NULL CHECK (mails >= 0)
);
ALTER TABLE mailroom.campaign_mail_counts OWNER TO mailroom_owner;
COMMENT ON TABLE mailroom.campaign_mail_counts IS
  'Per campaign: how many mails (contents rows) it holds, added to by each enqueue_campaign run. Read by campaign_summaries.';

INSERT INTO mailroom.campaign_mail_counts (campaign_id, mails)
SELECT c.campaign_id, count(*) FROM mailroom.contents c
WHERE c.campaign_id IS NOT NULL AND EXISTS (SELECT FROM mailroom.campaigns k WHERE k.id = c.campaign_id)
GROUP BY c.campaign_id;

COMMIT;
