-- Deploy mailroom:table_breaker to pg
-- requires: split_messages
-- requires: table_senders
-- requires: table_campaigns

-- The circuit breaker's state (issue 16): per campaign and per sender, a
-- rolling hard-bounce and complaint rate over the last N delivered mails,
-- kept as counters that every outcome updates in O(1) (no history scan),
-- the thresholds operators set, the senders it paused, and a record of each
-- trip with the figures that caused it.

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

-- Rolling counts, one row per campaign or sender. A row keeps the current
-- bucket and the one before it; when the current bucket has window_size
-- delivered mails it becomes the previous one. The rate over the last N is
-- the current bucket plus the share of the previous bucket that is still
-- inside the window (a sliding-window counter: exact at the roll, linear in
-- between), so each outcome is one update of one row.
CREATE TABLE mailroom.breaker_counts (
  scope           text NOT NULL,
  key             text NOT NULL,
  cur_delivered   integer NOT NULL DEFAULT 0,
  cur_bounced     integer NOT NULL DEFAULT 0,
  cur_complained  integer NOT NULL DEFAULT 0,
  prev_delivered  integer NOT NULL DEFAULT 0,
  prev_bounced    integer NOT NULL DEFAULT 0,
  prev_complained integer NOT NULL DEFAULT 0,
  updated_at      timestamptz NOT NULL DEFAULT now(),
  CONSTRAINT breaker_counts_pkey PRIMARY KEY (scope, key),
  CONSTRAINT breaker_counts_scope_valid CHECK (scope IN ('campaign', 'sender'))
) WITH (fillfactor = 50);
ALTER TABLE mailroom.breaker_counts OWNER TO mailroom_owner;
COMMENT ON TABLE mailroom.breaker_counts IS
  'Circuit breaker counters per campaign (key = campaign id) or sender (key = sender name): delivered, hard-bounced and complained mail in the current and the previous bucket of window_size delivered mails. Updated by mark_outcomes and by feedback; reset when an operator resumes.';

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
