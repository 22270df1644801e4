-- Verify mailroom:delivery_metrics on pg

BEGIN;

SELECT 1/has_function_privilege('mailroom_operator', 'mailroom.delivery_metrics(interval)', 'execute')::integer;
SELECT split, sender, time_zone, attempts, deliveries, failures, latency_p50, latency_p95, oldest_overdue,
       expired_leases, attempts_per_delivery, duplicates
FROM mailroom.delivery_metrics('1 hour') WHERE false;
SELECT split FROM mailroom._delivery_metrics('1 hour', now()) WHERE false;
DO $$
BEGIN
  ASSERT to_regprocedure('mailroom.delivery_metrics(interval, timestamptz)') IS NULL,
    'delivery_metrics still takes a clock parameter';
  ASSERT NOT has_function_privilege('mailroom_operator', 'mailroom._delivery_metrics(interval, timestamptz)', 'execute'),
    'operators may pin the clock of delivery_metrics';
  ASSERT (SELECT prosrc LIKE '%Attempts in flight%' AND prosrc LIKE '%mailroom.queue q%'
          FROM pg_proc WHERE oid = 'mailroom._delivery_metrics(interval, timestamptz)'::regprocedure),
    'delivery_metrics does not count attempts in flight from the queue';
END
$$;

ROLLBACK;
