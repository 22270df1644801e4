-- Deploy mailroom:table_messages to pg
-- requires: roles

BEGIN;

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

COMMIT;
