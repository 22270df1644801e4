-- Deploy mailroom:table_breaker_tallies to pg
-- requires: table_breaker

-- What the circuit breaker counts, laid out so that counting delivered mail
-- (every mark_outcomes) takes no row lock another reporter waits for, and
-- costs the report one small insert:
--
-- - breaker_pending: the delivered mail of one report, counted per sender
--   and campaign from the queue rows the report deleted, one row for each
--   sender and campaign together (insert-only: no row is shared, nothing is
--   looked up; a row per sender and another per campaign cost a report's
--   statement one more grouping). Folded into breaker_delivered
--   by whoever evaluates a bad event, by the report whose rows pass a
--   multiple of 200, and by the pg_cron job mailroom-breaker-fold every
--   minute.
-- - breaker_delivered: folded delivered mail per campaign or sender, one
--   row per backend that folded it (pg_backend_pid()). A backend runs one
--   transaction at a time, so two folders never update one row. The
--   delivered count of a campaign or sender is the sum of its rows, plus
--   breaker_counts.delivered_offset, plus its mail still pending.
-- - breaker_bad_events: each bounce or complaint (a batch's bounces of one
--   campaign or sender: one row) with the delivered count at which it was
--   evaluated, its position in the stream of delivered mail. The window of
--   the last N delivered holds the events at a position past total - N;
--   older ones are deleted as the window passes them. Bad events are the
--   only writers that take a shared row lock (their campaign's or sender's
--   row in breaker_counts).

BEGIN;

CREATE TABLE mailroom.breaker_pending (
  -- Numbers the rows: a report whose rows pass a multiple of 200 folds what
  -- is pending (no count of the rows, whose dead versions a count would
  -- have to step over).
  id          bigint GENERATED ALWAYS AS IDENTITY,
  sender      text NOT NULL,
  campaign_id bigint,
  delivered   integer NOT NULL,
  recorded_at timestamptz NOT NULL DEFAULT now()
);
ALTER TABLE mailroom.breaker_pending OWNER TO mailroom_owner;
COMMENT ON TABLE mailroom.breaker_pending IS
  'Circuit breaker: delivered mail (sent, and hard-bounced during the SMTP conversation) of one outcome batch, one row per sender and campaign (NULL: no campaign) with how many, not yet folded; it counts for the sender and for the campaign. breaker_fold moves it into breaker_delivered. Insert-only for reporters: they never meet.';

CREATE TABLE mailroom.breaker_delivered (
  scope       text NOT NULL,
  key         text NOT NULL,
  backend_pid integer NOT NULL,
  delivered   bigint NOT NULL,
  updated_at  timestamptz NOT NULL DEFAULT now(),
  CONSTRAINT breaker_delivered_pkey PRIMARY KEY (scope, key, backend_pid),
  CONSTRAINT breaker_delivered_scope_valid CHECK (scope IN ('campaign', 'sender'))
) WITH (fillfactor = 50);  -- every report updates its row: room for HOT updates
ALTER TABLE mailroom.breaker_delivered OWNER TO mailroom_owner;
COMMENT ON TABLE mailroom.breaker_delivered IS
  'Circuit breaker: delivered mail (sent, and hard-bounced during the SMTP conversation) per campaign or sender, counted from breaker_pending, one row per backend that counted it, so two counting transactions never update one row. Rows of backends that are gone are added to breaker_counts.delivered_offset when a bad event is evaluated.';
COMMENT ON COLUMN mailroom.breaker_delivered.backend_pid IS
  'pg_backend_pid() of the counting backend: only that backend''s own transaction updates the row while it runs.';

CREATE TABLE mailroom.breaker_bad_events (
  scope        text NOT NULL,
  key          text NOT NULL,
  at_delivered bigint NOT NULL,
  bounced      integer NOT NULL,
  complained   integer NOT NULL,
  recorded_at  timestamptz NOT NULL DEFAULT now(),
  CONSTRAINT breaker_bad_events_scope_valid CHECK (scope IN ('campaign', 'sender')),
  CONSTRAINT breaker_bad_events_counts CHECK (bounced >= 0 AND complained >= 0 AND bounced + complained > 0)
);
ALTER TABLE mailroom.breaker_bad_events OWNER TO mailroom_owner;
CREATE INDEX breaker_bad_events_window_idx ON mailroom.breaker_bad_events (scope, key, at_delivered);
COMMENT ON TABLE mailroom.breaker_bad_events IS
  'Circuit breaker: hard bounces and complaints of one campaign or sender still inside its window, each at the delivered count (since the last resume) when it was evaluated; the window of the last N delivered holds those with at_delivered > total - N.';

COMMIT;
