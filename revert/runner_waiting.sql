-- Revert mailroom:runner_waiting from pg: back to the v0.4.0 barrier
-- (advisory lock 1835100525/3). enqueue is reverted first (it comes later in
-- the plan), so nothing takes the table lock any more when it goes.

BEGIN;

CREATE OR REPLACE FUNCTION mailroom.enqueues_settled()
RETURNS boolean
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = mailroom, pg_temp
AS $$
BEGIN
  -- The barrier is free only when no enqueue that may have skipped its
  -- wake-up is still in flight. Tried, never waited for (waiting would queue
  -- every new enqueue behind this call), and held only to the end of this
  -- transaction.
  RETURN pg_try_advisory_xact_lock(1835100525, 3);
END
$$;
ALTER FUNCTION mailroom.enqueues_settled() OWNER TO mailroom_owner;
REVOKE ALL ON FUNCTION mailroom.enqueues_settled() FROM PUBLIC;
GRANT EXECUTE ON FUNCTION mailroom.enqueues_settled() TO mailroom_runner;
COMMENT ON FUNCTION mailroom.enqueues_settled() IS
  'Runner: true when every enqueue that decided not to wake runners has committed or rolled back. A runner that started waiting (runner_waiting(true)) claims once more after this returns true, and only then sleeps until notified.';

DROP TABLE mailroom.enqueue_barrier;

COMMIT;
