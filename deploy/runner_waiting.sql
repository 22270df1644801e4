-- Deploy mailroom:runner_waiting to pg (rework after v0.4.0)
-- requires: runner_waiting@v0.4.0
--
-- Issue 32, item 4. The barrier between enqueue and a runner about to sleep
-- was advisory lock 1835100525/3, and advisory locks belong to every login
-- with CONNECT: a stranger holding it exclusively made every enqueue notify
-- and enqueues_settled never true (runners never slept: a claim every few
-- milliseconds, for as long as the stranger liked). Now the barrier is a
-- table lock on mailroom.enqueue_barrier, a table with no rows and no grants:
-- LOCK TABLE needs a privilege on it, so only mailroom's own functions (its
-- owner) can take it.
--
-- - enqueue takes it in ROW EXCLUSIVE mode (the mode every INSERT takes on
--   its table: granted through the fast path, without the shared lock
--   manager, while no one tries a stronger mode) and keeps it to its commit;
-- - enqueues_settled tries SHARE mode, which conflicts with ROW EXCLUSIVE,
--   with NOWAIT, and holds it to the end of its own statement's transaction.
--   Never waiting, it never queues an enqueue behind it; an enqueue waits at
--   most for the one statement of a runner's autocommit call.
--
-- runner_waiting is unchanged, copied verbatim so this file defines every
-- function of the change.

BEGIN;

CREATE TABLE mailroom.enqueue_barrier ();
ALTER TABLE mailroom.enqueue_barrier OWNER TO mailroom_owner;
REVOKE ALL ON mailroom.enqueue_barrier FROM PUBLIC;
COMMENT ON TABLE mailroom.enqueue_barrier IS
  'No rows: its table lock is the wake-up barrier (enqueue ROW EXCLUSIVE, enqueues_settled tries SHARE). No grants, so no other session can take it.';

CREATE OR REPLACE FUNCTION mailroom.runner_waiting(p_waiting boolean)
RETURNS boolean
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = mailroom, pg_temp
AS $$
DECLARE
  v_found boolean;
BEGIN
  IF p_waiting IS NULL THEN
    RAISE EXCEPTION 'mailroom: waiting: must be true or false' USING ERRCODE = '22023';
  END IF;
  DELETE FROM mailroom.runner_waits w
  WHERE w.pid <> pg_backend_pid()
    AND NOT EXISTS (SELECT FROM pg_catalog.pg_stat_activity a WHERE a.pid = w.pid);
  IF p_waiting THEN
    INSERT INTO mailroom.runner_waits (pid) VALUES (pg_backend_pid()) ON CONFLICT (pid) DO NOTHING;
    RETURN true;
  END IF;
  -- false (and nothing changed) if this session was not waiting.
  DELETE FROM mailroom.runner_waits WHERE pid = pg_backend_pid();
  GET DIAGNOSTICS v_found = ROW_COUNT;
  RETURN v_found;
END
$$;
ALTER FUNCTION mailroom.runner_waiting(boolean) OWNER TO mailroom_owner;
REVOKE ALL ON FUNCTION mailroom.runner_waiting(boolean) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION mailroom.runner_waiting(boolean) TO mailroom_runner;
COMMENT ON FUNCTION mailroom.runner_waiting(boolean) IS
  'Runner: true = this session waits for work (enqueue notifies while any session does; until false or disconnect); false = no longer waiting (returns whether it was). Call enqueues_settled before sleeping.';

CREATE OR REPLACE FUNCTION mailroom.enqueues_settled()
RETURNS boolean
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = mailroom, pg_temp
AS $$
BEGIN
  -- Free only when no enqueue that may have skipped its wake-up is still in
  -- flight. Tried, never waited for (waiting would queue every new enqueue
  -- behind this call), and held to the end of this transaction.
  LOCK TABLE mailroom.enqueue_barrier IN SHARE MODE NOWAIT;
  RETURN true;
EXCEPTION WHEN lock_not_available THEN
  RETURN false;
END
$$;
ALTER FUNCTION mailroom.enqueues_settled() OWNER TO mailroom_owner;
REVOKE ALL ON FUNCTION mailroom.enqueues_settled() FROM PUBLIC;
GRANT EXECUTE ON FUNCTION mailroom.enqueues_settled() TO mailroom_runner;
COMMENT ON FUNCTION mailroom.enqueues_settled() IS
  'Runner: true when every enqueue that decided not to wake runners has committed or rolled back. A runner that started waiting (runner_waiting(true)) claims once more after this returns true, and only then sleeps until notified.';

COMMIT;
