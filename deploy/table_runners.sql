-- Deploy mailroom:table_runners to pg
-- requires: roles

BEGIN;

-- One row per runner process, written by its heartbeat (runner_heartbeat) with
-- its outcome flushes. UNLOGGED like the cache and the rate limits: the rows
-- describe processes, not mail, and crash recovery empties the table; every
-- live runner writes its row again within one heartbeat interval.
CREATE UNLOGGED TABLE mailroom.runners (
  worker             text COLLATE "C" NOT NULL,
  run_id             uuid NOT NULL,
  host               text NOT NULL,
  pid                integer NOT NULL,
  version            text NOT NULL,
  sender             text,
  concurrency        integer NOT NULL,
  heartbeat_interval interval NOT NULL,
  started_at         timestamptz NOT NULL,
  last_seen          timestamptz NOT NULL,
  stopped_at         timestamptz,
  in_flight          integer NOT NULL,
  sent               bigint NOT NULL,
  retried            bigint NOT NULL,
  failed             bigint NOT NULL,
  ambiguous          bigint NOT NULL,
  sent_per_second    numeric NOT NULL DEFAULT 0,
  rate_since         timestamptz NOT NULL,
  rate_base          bigint NOT NULL,
  relay_up           boolean NOT NULL,
  relay_down_since   timestamptz,
  relay_error        text,
  CONSTRAINT runners_pkey PRIMARY KEY (worker),
  CONSTRAINT runners_counts_not_negative CHECK (least(in_flight, sent, retried, failed, ambiguous) >= 0),
  CONSTRAINT runners_relay_down_since CHECK (relay_up = (relay_down_since IS NULL)),
  CONSTRAINT runners_relay_error_short CHECK (char_length(relay_error) <= 300)
-- Every heartbeat updates its row and changes no indexed column: free space
-- on the page keeps those HOT updates.
) WITH (fillfactor = 50);

ALTER TABLE mailroom.runners OWNER TO mailroom_owner;
REVOKE ALL ON mailroom.runners FROM PUBLIC;

COMMENT ON TABLE mailroom.runners IS
  'One row per runner (worker name), written by mailroom.runner_heartbeat with the runner''s outcome flushes and marked stopped by mailroom.runner_gone. UNLOGGED: emptied by crash recovery, refilled within one heartbeat. Private: operators read mailroom.runner_status.';
COMMENT ON COLUMN mailroom.runners.worker IS 'The runner''s --worker name, as in the attempts ledger.';
COMMENT ON COLUMN mailroom.runners.run_id IS
  'Random per process start: a new run_id under the same worker name is a restart (counters and started_at start over).';
COMMENT ON COLUMN mailroom.runners.started_at IS
  'Database time of the first heartbeat of this run (after a crash of PostgreSQL emptied the table: of its first heartbeat since).';
COMMENT ON COLUMN mailroom.runners.last_seen IS 'Database time of the last heartbeat.';
COMMENT ON COLUMN mailroom.runners.stopped_at IS 'Set by runner_gone when the runner stopped cleanly; NULL while it runs or after it died.';
COMMENT ON COLUMN mailroom.runners.heartbeat_interval IS
  'The longest the runner waits between heartbeats; runner_status calls it alive while last_seen is within 3 intervals.';
COMMENT ON COLUMN mailroom.runners.in_flight IS 'Mail claimed and not yet sent or handed back, at the last heartbeat.';
COMMENT ON COLUMN mailroom.runners.sent IS 'Mails this run reported sent (likewise retried, failed, ambiguous).';
COMMENT ON COLUMN mailroom.runners.sent_per_second IS
  'Mails sent per second over the last completed sample (at least 5 seconds, or one heartbeat interval) of this run.';
COMMENT ON COLUMN mailroom.runners.rate_since IS 'Internal: start of the current rate sample.';
COMMENT ON COLUMN mailroom.runners.rate_base IS 'Internal: sent at rate_since.';
COMMENT ON COLUMN mailroom.runners.relay_up IS 'Whether the runner could reach its SMTP relay (false: it claims nothing and probes).';
COMMENT ON COLUMN mailroom.runners.relay_error IS
  'Why the relay is down, at most 300 characters; the runner redacts passwords, and runner_heartbeat refuses a URL carrying one.';

COMMIT;
