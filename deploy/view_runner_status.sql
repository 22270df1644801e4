-- Deploy mailroom:view_runner_status to pg
-- requires: table_runners

BEGIN;

-- Alive means: not stopped, and heard from within three of its own heartbeat
-- intervals (each runner says how often it beats, so a runner started with a
-- longer interval is not called dead too early, and nothing needs a setting).
CREATE VIEW mailroom.runner_status WITH (security_barrier) AS
SELECT r.worker,
       r.host,
       r.pid,
       r.version,
       r.sender,
       r.concurrency,
       CASE WHEN r.stopped_at IS NOT NULL THEN 'stopped'
            WHEN r.last_seen >= now() - 3 * r.heartbeat_interval THEN 'running'
            ELSE 'lost' END AS state,
       r.stopped_at IS NULL AND r.last_seen >= now() - 3 * r.heartbeat_interval AS alive,
       r.started_at,
       r.last_seen,
       greatest(now() - r.last_seen, interval '0') AS seen_ago,
       r.stopped_at,
       r.in_flight,
       r.sent,
       r.retried,
       r.failed,
       r.ambiguous,
       r.sent_per_second,
       r.relay_up,
       r.relay_down_since,
       r.relay_error,
       r.heartbeat_interval
FROM mailroom.runners r
ORDER BY alive DESC, r.worker;
ALTER VIEW mailroom.runner_status OWNER TO mailroom_owner;
REVOKE ALL ON mailroom.runner_status FROM PUBLIC;
GRANT SELECT ON mailroom.runner_status TO mailroom_operator;
COMMENT ON VIEW mailroom.runner_status IS
  'Runners as their heartbeats describe them, live ones first: state running (alive), stopped (said goodbye with runner_gone) or lost (silent for 3 heartbeat intervals: killed, hung or cut off from the database). Rows unseen for a day are forgotten.';
COMMENT ON COLUMN mailroom.runner_status.alive IS
  'Not stopped, and last_seen within 3 of the runner''s heartbeat intervals.';
COMMENT ON COLUMN mailroom.runner_status.sent IS 'Mails this run reported sent since it started (retried, failed, ambiguous likewise).';
COMMENT ON COLUMN mailroom.runner_status.sent_per_second IS 'Recent send rate: over the last sample of at least 5 seconds.';
COMMENT ON COLUMN mailroom.runner_status.relay_up IS 'false: the runner cannot reach its SMTP relay; it claims nothing and probes with backoff.';

COMMIT;
