-- Deploy mailroom:table_campaigns to pg
-- requires: table_messages
-- requires: table_templates
-- requires: function_next_window_opening

BEGIN;

CREATE TABLE mailroom.campaigns (
  id            bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
  name          text NOT NULL,
  template_key  text NOT NULL REFERENCES mailroom.templates (key),
  vars          jsonb NOT NULL DEFAULT '{}',
  headers       jsonb NOT NULL DEFAULT '{}',
  priority      smallint NOT NULL DEFAULT 0,
  sender        text NOT NULL DEFAULT 'default',
  max_attempts  integer NOT NULL DEFAULT 5,
  on_ambiguous  text NOT NULL DEFAULT 'retry',
  send_at       timestamptz NOT NULL,
  time_zone     text NOT NULL DEFAULT 'UTC',
  window_start  time,
  window_end    time,
  status        text NOT NULL DEFAULT 'active',
  created_at    timestamptz NOT NULL DEFAULT now(),
  updated_at    timestamptz NOT NULL DEFAULT now(),
  finished_at   timestamptz,
  CONSTRAINT campaigns_name_unique UNIQUE (name),
  CONSTRAINT campaigns_name_format CHECK (name <> '' AND length(name) <= 200 AND name !~ '[[:cntrl:]]'),
  CONSTRAINT campaigns_status_valid CHECK (status IN ('active', 'paused', 'cancelled', 'done')),
  CONSTRAINT campaigns_priority_range CHECK (priority BETWEEN -100 AND 100),
  CONSTRAINT campaigns_window_complete CHECK ((window_start IS NULL) = (window_end IS NULL)),
  CONSTRAINT campaigns_window_not_empty CHECK (window_start <> window_end),
  CONSTRAINT campaigns_vars_object CHECK (jsonb_typeof(vars) = 'object'),
  CONSTRAINT campaigns_headers_object CHECK (jsonb_typeof(headers) = 'object')
);
ALTER TABLE mailroom.campaigns OWNER TO mailroom_owner;
COMMENT ON TABLE mailroom.campaigns IS
  'One row per logical send ("weekly digest 2026-07-06"): its messages are rows of mailroom.messages with campaign_id set. Write through enqueue_campaign and pause/resume/cancel_campaign.';
COMMENT ON COLUMN mailroom.campaigns.name IS
  'Unique: enqueue_campaign with an existing name adds recipients to that campaign (nobody twice).';
COMMENT ON COLUMN mailroom.campaigns.status IS
  'active, paused (its queued mail is held as messages.status = paused), cancelled, done (nothing left to send; set by finish_campaigns).';
COMMENT ON COLUMN mailroom.campaigns.time_zone IS
  'Zone of the send window for recipients whose own time_zone is not known.';
COMMENT ON COLUMN mailroom.campaigns.window_start IS
  'Send window [window_start, window_end) in recipient-local time (start > end spans midnight); NULL = any hour.';
COMMENT ON COLUMN mailroom.campaigns.vars IS
  'Template variables shared by every recipient; each recipient''s vars override them.';

-- The recipient's zone, so a send window can be re-applied on resume and retry.
ALTER TABLE mailroom.messages ADD COLUMN recipient_zone text;
COMMENT ON COLUMN mailroom.messages.recipient_zone IS
  'IANA zone of the recipient for campaign and schedule mail with a send window (NULL otherwise).';

ALTER TABLE mailroom.messages
  ADD CONSTRAINT messages_campaign_fk FOREIGN KEY (campaign_id) REFERENCES mailroom.campaigns (id),
  ADD CONSTRAINT messages_campaign_recipient_present CHECK (campaign_id IS NULL OR recipient_id IS NOT NULL);
-- A re-run adds nobody twice (NULL campaign_id rows are all distinct).
CREATE UNIQUE INDEX messages_campaign_recipient_unique ON mailroom.messages (campaign_id, recipient_id)
  WHERE campaign_id IS NOT NULL;
COMMENT ON INDEX mailroom.messages_campaign_recipient_unique IS
  'UNIQUE (campaign_id, recipient_id): a campaign mails each recipient at most once.';

COMMIT;
