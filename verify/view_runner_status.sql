-- Verify mailroom:view_runner_status on pg

BEGIN;

SELECT worker, host, pid, version, sender, concurrency, state, alive, started_at, last_seen, seen_ago,
       stopped_at, in_flight, sent, retried, failed, ambiguous, sent_per_second, relay_up, relay_down_since,
       relay_error, heartbeat_interval
FROM mailroom.runner_status WHERE false;
SELECT 1/has_table_privilege('mailroom_operator', 'mailroom.runner_status', 'select')::integer;

ROLLBACK;
