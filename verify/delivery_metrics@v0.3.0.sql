-- Verify mailroom:delivery_metrics on pg

BEGIN;

SELECT 1/has_function_privilege('mailroom_operator', 'mailroom.delivery_metrics(interval, timestamptz)', 'execute')::integer;
SELECT split, sender, time_zone, attempts, deliveries, failures, latency_p50, latency_p95, oldest_overdue,
       expired_leases, attempts_per_delivery, duplicates
FROM mailroom.delivery_metrics('1 hour') WHERE false;
DO $$
BEGIN
  ASSERT (SELECT prosrc LIKE '%Attempts in flight%' FROM pg_proc WHERE oid = 'mailroom.delivery_metrics(interval, timestamptz)'::regprocedure),
    'delivery_metrics does not count attempts in flight';
END
$$;

ROLLBACK;
