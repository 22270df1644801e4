-- Revert mailroom:runner_waiting from pg (back to the v0.3.0 functions)
-- requires: roles

-- The wake-up protocol between enqueue and runners (see enqueue): a runner
-- that waits for work holds the waiting lock, a session-level advisory lock
-- taken shared, so any number of runners can wait at once and a runner that
-- dies releases it with its connection. enqueue notifies only while someone
-- holds it. Both locks are in mailroom's advisory lock space (1835100525,
-- 'mail'): 2 is the waiting lock, 3 the barrier every notify-skipping enqueue
-- holds shared until it commits.

BEGIN;

DROP TABLE mailroom.runner_waits;


CREATE OR REPLACE FUNCTION mailroom.runner_waiting(p_waiting boolean)
RETURNS boolean
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = mailroom, pg_temp
AS $$
BEGIN
  IF p_waiting IS NULL THEN
    RAISE EXCEPTION 'mailroom: waiting: must be true or false' USING ERRCODE = '22023';
  END IF;
  IF p_waiting THEN
    PERFORM pg_advisory_lock_shared(1835100525, 2);
    RETURN true;
  END IF;
  -- Releases one hold of this session; false (and nothing released) if it held none.
  IF EXISTS (SELECT FROM pg_locks l
             WHERE l.locktype = 'advisory' AND l.pid = pg_backend_pid() AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database())
               AND l.classid = 1835100525 AND l.objid = 2 AND l.objsubid = 2 AND l.mode = 'ShareLock') THEN
    RETURN pg_advisory_unlock_shared(1835100525, 2);
  END IF;
  RETURN false;
END
$$;
ALTER FUNCTION mailroom.runner_waiting(boolean) OWNER TO mailroom_owner;
REVOKE ALL ON FUNCTION mailroom.runner_waiting(boolean) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION mailroom.runner_waiting(boolean) TO mailroom_runner;
COMMENT ON FUNCTION mailroom.runner_waiting(boolean) IS
  'Runner: true = this session waits for work (enqueue notifies while any session does; held until false or disconnect); false = no longer waiting. Call enqueues_settled before sleeping.';

CREATE OR REPLACE FUNCTION mailroom.enqueues_settled()
RETURNS boolean
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = mailroom, pg_temp
AS $$
BEGIN
  -- The barrier is free only when no enqueue that may have skipped its
  -- wake-up is still in flight; taken and released at once, never waited for
  -- (waiting would queue every new enqueue behind this call).
  IF pg_try_advisory_lock(1835100525, 3) THEN
    PERFORM pg_advisory_unlock(1835100525, 3);
    RETURN true;
  END IF;
  RETURN false;
END
$$;
ALTER FUNCTION mailroom.enqueues_settled() OWNER TO mailroom_owner;
REVOKE ALL ON FUNCTION mailroom.enqueues_settled() FROM PUBLIC;
GRANT EXECUTE ON FUNCTION mailroom.enqueues_settled() TO mailroom_runner;
COMMENT ON FUNCTION mailroom.enqueues_settled() IS
  'Runner: true when every enqueue that decided not to wake runners has committed or rolled back. A runner that started waiting (runner_waiting(true)) claims once more after this returns true, and only then sleeps until notified.';

COMMIT;
