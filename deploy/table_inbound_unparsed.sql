-- Deploy mailroom:table_inbound_unparsed to pg
-- requires: role_feedback

-- Inbound mail to the bounce domain that mailroom inbound could not use: not
-- a DSN, ARF report or unsubscribe it understood, a VERP address whose
-- signature does not verify, a loop, malformed MIME, parts over the parsing
-- limits. It is kept whole (up to the receiver's 25 MiB message limit) with
-- the reason, so nothing that came back is lost and an operator can look,
-- never dropped and never a reason to refuse the mail.

BEGIN;

CREATE TABLE mailroom.inbound_unparsed (
  id            bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
  received_at   timestamptz NOT NULL DEFAULT now(),
  reason        text NOT NULL,
  envelope_from text,
  envelope_to   text,
  size          integer NOT NULL,
  raw           bytea NOT NULL,
  CONSTRAINT inbound_unparsed_size_matches CHECK (size = octet_length(raw)),
  CONSTRAINT inbound_unparsed_size_bounded CHECK (size <= 26214400),
  CONSTRAINT inbound_unparsed_reason_bounded CHECK (length(reason) BETWEEN 1 AND 500)
);
ALTER TABLE mailroom.inbound_unparsed OWNER TO mailroom_owner;
CREATE INDEX inbound_unparsed_received_at_idx ON mailroom.inbound_unparsed (received_at);

COMMENT ON TABLE mailroom.inbound_unparsed IS
  'Inbound mail mailroom inbound could not parse or match, kept whole with the reason (written by mailroom.keep_unparsed_inbound only).';
COMMENT ON COLUMN mailroom.inbound_unparsed.reason IS
  'Why it was not used: a short code first (malformed_mime, too_large, bad_verp_signature, loop, no_report, unmatched, …), then details.';
COMMENT ON COLUMN mailroom.inbound_unparsed.envelope_from IS
  'SMTP MAIL FROM as received ('''' for the null sender of a DSN).';
COMMENT ON COLUMN mailroom.inbound_unparsed.envelope_to IS
  'The SMTP RCPT TO address(es) as received, comma-separated.';
COMMENT ON COLUMN mailroom.inbound_unparsed.raw IS
  'The message exactly as received (at most 25 MiB, the receiver''s limit).';

COMMIT;
