-- Deploy mailroom:table_breaker to pg
-- requires: split_messages
-- requires: table_senders
-- requires: table_campaigns

-- The circuit breaker's state (issue 16): per campaign and per sender, a
-- rolling hard-bounce and complaint rate over the last N delivered mails
-- (the counts themselves are in table_breaker_tallies: delivered mail per
-- backend, bad events where in the delivered count they happened; no
-- history scan), the thresholds operators set, the senders it paused, and
-- a record of each trip with the figures that caused it.

BEGIN;

CREATE TABLE mailroom.breaker_settings (
  scope           text PRIMARY KEY,
  window_size     integer NOT NULL,
  min_sample      integer NOT NULL,
  bounce_warn     numeric NOT NULL,
  bounce_pause    numeric NOT NULL,
  complaint_warn  numeric NOT NULL,
  complaint_pause numeric NOT NULL,
  updated_at      timestamptz NOT NULL DEFAULT now(),
  CONSTRAINT breaker_settings_scope_valid CHECK (scope IN ('campaign', 'sender')),
  CONSTRAINT breaker_settings_window_range CHECK (window_size BETWEEN 10 AND 10000000),
  CONSTRAINT breaker_settings_min_sample_range CHECK (min_sample BETWEEN 1 AND window_size),
  CONSTRAINT breaker_settings_rates_range CHECK (
    bounce_warn > 0 AND bounce_warn <= bounce_pause AND bounce_pause <= 1
    AND complaint_warn > 0 AND complaint_warn <= complaint_pause AND complaint_pause <= 1)
);
ALTER TABLE mailroom.breaker_settings OWNER TO mailroom_owner;
COMMENT ON TABLE mailroom.breaker_settings IS
  'Circuit breaker thresholds per scope (campaign, sender); change with set_breaker_thresholds. Rates are fractions (0.05 = 5 %).';
COMMENT ON COLUMN mailroom.breaker_settings.window_size IS
  'N: the rates are over (about) the last N delivered mails of the campaign or sender.';
COMMENT ON COLUMN mailroom.breaker_settings.min_sample IS
  'No trip before this many delivered mails are in the window: two bounces in the first ten mails say little.';
COMMENT ON COLUMN mailroom.breaker_settings.bounce_pause IS
  'Hard-bounce rate at or above which the campaign or sender is paused.';
COMMENT ON COLUMN mailroom.breaker_settings.complaint_pause IS
  'Complaint rate at or above which the campaign or sender is paused.';

-- Defaults. Amazon SES puts an account under review at a 5 % bounce rate
-- and may pause it at 10 %; for complaints at 0.1 % and 0.5 %. mailroom
-- pauses at SES's review levels so that one bad list stops itself before
-- the provider acts on the whole account (and every other campaign with it),
-- and warns at half of them. A complaint pause at 0.1 % is one complaint
-- per thousand: the minimum sample of 200 keeps a single early complaint
-- (0.5 % of 200) from pausing, and the window of 1,000 keeps the figure
-- recent while still meaning something at 0.1 %.
INSERT INTO mailroom.breaker_settings
  (scope, window_size, min_sample, bounce_warn, bounce_pause, complaint_warn, complaint_pause) VALUES
  ('campaign', 1000, 200, 0.025, 0.05, 0.0005, 0.001),
  ('sender',   1000, 200, 0.025, 0.05, 0.0005, 0.001);

-- One row per campaign or sender that had a bad event (or a resume): the
-- row a bad event's evaluation locks, so that evaluations of one campaign
-- or sender take turns and each sees the ones before it. Delivered mail
-- never touches it: delivered counts go to breaker_delivered, one row per
-- backend (table_breaker_tallies), and this row only holds what is added to
-- their sum. Updated by bad events and resumes alone, so no fillfactor.
CREATE TABLE mailroom.breaker_counts (
  scope            text NOT NULL,
  key              text NOT NULL,
  delivered_offset bigint NOT NULL DEFAULT 0,
  updated_at       timestamptz NOT NULL DEFAULT now(),
  CONSTRAINT breaker_counts_pkey PRIMARY KEY (scope, key),
  CONSTRAINT breaker_counts_scope_valid CHECK (scope IN ('campaign', 'sender'))
);
ALTER TABLE mailroom.breaker_counts OWNER TO mailroom_owner;
COMMENT ON TABLE mailroom.breaker_counts IS
  'Circuit breaker: one row per campaign (key = campaign id) or sender (key = sender name) that had a bounce or complaint or was resumed; its row lock makes the evaluations of one campaign or sender take turns. Delivered mail is counted in breaker_delivered, never here.';
COMMENT ON COLUMN mailroom.breaker_counts.delivered_offset IS
  'Added to the sum of breaker_delivered to give the delivered mails counted since the last resume: the counts of folded (compacted) rows of backends that are gone, minus the total at the last resume.';

CREATE TABLE mailroom.sender_pauses (
  sender    text PRIMARY KEY,
  paused_at timestamptz NOT NULL DEFAULT now(),
  reason    text NOT NULL,
  figures   jsonb NOT NULL DEFAULT '{}'
);
ALTER TABLE mailroom.sender_pauses OWNER TO mailroom_owner;
COMMENT ON TABLE mailroom.sender_pauses IS
  'Paused senders: claim_batch parks their mail (queue status paused, reason sender_paused) until an operator calls resume_sender.';

CREATE TABLE mailroom.breaker_trips (
  id             bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
  scope          text NOT NULL,
  key            text NOT NULL,
  tripped_at     timestamptz NOT NULL,
  reason         text NOT NULL,
  delivered      numeric NOT NULL,
  bounced        numeric NOT NULL,
  complained     numeric NOT NULL,
  bounce_rate    numeric NOT NULL,
  complaint_rate numeric NOT NULL,
  resumed_at     timestamptz,
  CONSTRAINT breaker_trips_scope_valid CHECK (scope IN ('campaign', 'sender'))
);
ALTER TABLE mailroom.breaker_trips OWNER TO mailroom_owner;
CREATE INDEX breaker_trips_open_idx ON mailroom.breaker_trips (scope, key) WHERE resumed_at IS NULL;
COMMENT ON TABLE mailroom.breaker_trips IS
  'Every automatic pause by the circuit breaker: what, when, why, and the windowed figures at that moment; resumed_at is set when an operator resumes.';

COMMIT;
