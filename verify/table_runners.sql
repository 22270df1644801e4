-- Verify mailroom:table_runners on pg

BEGIN;

SELECT worker, run_id, host, pid, version, sender, concurrency, heartbeat_interval, started_at, last_seen,
       stopped_at, in_flight, sent, retried, failed, ambiguous, sent_per_second, rate_since, rate_base, relay_up, relay_down_since,
       relay_error
  FROM mailroom.runners
 WHERE false;

DO $$
BEGIN
  ASSERT (SELECT relpersistence FROM pg_catalog.pg_class
           WHERE oid = 'mailroom.runners'::regclass) = 'u',
         'mailroom.runners is not UNLOGGED';
END
$$;

ROLLBACK;
