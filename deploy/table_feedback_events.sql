-- Deploy mailroom:table_feedback_events to pg
-- requires: role_feedback

-- What came back about mail after it left: one row per event a DSN, an ARF
-- report, a mailto: unsubscribe or a provider webhook reported. event_key
-- makes each event count once however often it is delivered (MTAs resend a
-- DSN they got no 250 for; webhooks retry). campaign_id, sender and stream
-- are copied from the mail's contents when the event is recorded, so the
-- rates per campaign and per sender (the circuit breaker) read this table
-- alone, and keep their figures after prune retires the mail.

BEGIN;

CREATE TABLE mailroom.feedback_events (
  id          bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
  event_key   text NOT NULL,
  kind        text NOT NULL,
  message_id  bigint,
  address     text,
  status      text,
  detail      text,
  source      text NOT NULL,
  campaign_id bigint,
  sender      text,
  stream      text,
  received_at timestamptz NOT NULL DEFAULT now(),
  CONSTRAINT feedback_events_event_key_unique UNIQUE (event_key),
  CONSTRAINT feedback_events_kind_valid
    CHECK (kind IN ('bounce', 'delayed', 'complaint', 'delivered', 'unsubscribe')),
  CONSTRAINT feedback_events_names_mail CHECK (message_id IS NOT NULL OR address IS NOT NULL),
  CONSTRAINT feedback_events_status_format CHECK (status ~ '^[245]\.[0-9]{1,3}\.[0-9]{1,3}$'),
  CONSTRAINT feedback_events_detail_bounded CHECK (length(detail) <= 2000),
  CONSTRAINT feedback_events_key_bounded CHECK (length(event_key) BETWEEN 1 AND 500)
);
ALTER TABLE mailroom.feedback_events OWNER TO mailroom_owner;

CREATE INDEX feedback_events_message_idx ON mailroom.feedback_events (message_id) WHERE message_id IS NOT NULL;
CREATE INDEX feedback_events_campaign_idx ON mailroom.feedback_events (campaign_id, received_at) WHERE campaign_id IS NOT NULL;
CREATE INDEX feedback_events_sender_idx ON mailroom.feedback_events (sender, received_at);

COMMENT ON TABLE mailroom.feedback_events IS
  'What came back after mail left (bounces, delays, complaints, deliveries, unsubscribes), one row per event; written by mailroom.record_feedback only.';
COMMENT ON COLUMN mailroom.feedback_events.event_key IS
  'The event''s identity, given by its reporter (a DSN: source, message and recipient; a webhook: the provider''s event id): an event recorded twice changes nothing the second time.';
COMMENT ON COLUMN mailroom.feedback_events.kind IS
  'bounce (permanent: the mail''s ledger gets a bounced row, the address is suppressed for all streams), delayed (transient, recorded only), complaint (suppressed for the mail''s stream), delivered (recorded only), unsubscribe (suppressed for the mail''s stream).';
COMMENT ON COLUMN mailroom.feedback_events.message_id IS
  'The mail it is about (mailroom.contents.id), when the reporter could tell (VERP, Message-ID, a provider''s metadata); NULL when only the address is known.';
COMMENT ON COLUMN mailroom.feedback_events.address IS
  'The recipient it is about: as reported, else the mail''s own recipient.';
COMMENT ON COLUMN mailroom.feedback_events.status IS
  'The enhanced status code reported (RFC 3463, e.g. 5.1.1), if any.';
COMMENT ON COLUMN mailroom.feedback_events.source IS
  'Who reported it: dsn, arf, mailto, ses, sendgrid, mailgun, postmark, app, …';
COMMENT ON COLUMN mailroom.feedback_events.campaign_id IS
  'The mail''s campaign when it was recorded (copied from contents: rates per campaign need no join and survive prune).';
COMMENT ON COLUMN mailroom.feedback_events.sender IS
  'The mail''s sender profile when it was recorded (copied from contents).';
COMMENT ON COLUMN mailroom.feedback_events.stream IS
  'The mail''s stream when it was recorded (NULL when the mail is unknown).';

COMMIT;
