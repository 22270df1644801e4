-- Deploy mailroom:table_attempts to pg
-- requires: table_messages

BEGIN;

CREATE TABLE mailroom.attempts (
  id            bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
  message_id    bigint NOT NULL REFERENCES mailroom.messages (id) ON DELETE CASCADE,
  delivery_key  text NOT NULL,
  attempt       integer NOT NULL,
  worker        text,
  lease_token   uuid,
  claimed_at    timestamptz,
  finished_at   timestamptz,
  reported_at   timestamptz,
  reported      text,
  outcome       text,
  smtp_code     smallint,
  smtp_enhanced text,
  smtp_text     text,
  provider_id   text,
  duplicate     boolean NOT NULL DEFAULT false,
  CONSTRAINT attempts_reported_valid
    CHECK (reported IN ('sent', 'retry', 'failed', 'ambiguous')),
  CONSTRAINT attempts_outcome_valid
    CHECK (outcome IN ('sent', 'retry', 'failed', 'ambiguous', 'expired', 'stale', 'released')),
  CONSTRAINT attempts_finished_with_outcome CHECK ((outcome IS NULL) = (finished_at IS NULL)),
  CONSTRAINT attempts_smtp_code_range CHECK (smtp_code BETWEEN 200 AND 599),
  CONSTRAINT attempts_smtp_enhanced_format CHECK (smtp_enhanced ~ '^[245]\.[0-9]{1,3}\.[0-9]{1,3}$'),
  CONSTRAINT attempts_smtp_text_bounded CHECK (length(smtp_text) <= 1000),
  CONSTRAINT attempts_provider_id_bounded CHECK (length(provider_id) <= 255)
);
ALTER TABLE mailroom.attempts OWNER TO mailroom_owner;

CREATE INDEX attempts_message_idx ON mailroom.attempts (message_id, lease_token);
CREATE INDEX attempts_claimed_at_idx ON mailroom.attempts (claimed_at);
CREATE INDEX attempts_successful_idx ON mailroom.attempts (message_id) WHERE reported = 'sent';

COMMENT ON TABLE mailroom.attempts IS
  'The delivery ledger: one row per claim of a message and what became of it. Duplicates and replays show here.';
COMMENT ON COLUMN mailroom.attempts.reported IS
  'What the runner said: sent, retry, failed or ambiguous; NULL if it never reported (crash, lease expiry).';
COMMENT ON COLUMN mailroom.attempts.outcome IS
  'What the queue made of the attempt: sent, retry, failed, ambiguous, expired (lease ran out), stale (reported after the lease was lost), released (handed back unsent). NULL while in flight.';
COMMENT ON COLUMN mailroom.attempts.reported_at IS
  'When the runner reported; later than finished_at for a report that arrived after the lease expired.';
COMMENT ON COLUMN mailroom.attempts.duplicate IS
  'A successful send reported for a delivery key that already had one: the recipient got the mail twice.';

COMMIT;
