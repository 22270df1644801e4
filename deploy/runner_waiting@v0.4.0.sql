-- Deploy mailroom:runner_waiting to pg
-- requires: runner_waiting@v0.3.0
-- requires: table_queue

-- The wake-up protocol between enqueue and runners (see enqueue). v0.3 had
-- enqueue try a session-level advisory lock that waiting runners held
-- shared: any login could hold that lock and stall every enqueue behind the
-- barrier, and a query cancel landing between enqueue's try and its unlock
-- left a pooled application connection holding it. Now:
--
-- - a runner that waits for work has a row in mailroom.runner_waits (its
--   backend pid); enqueue notifies while any row exists. A row whose backend
--   is gone is removed the next time any runner starts or stops waiting, so a
--   crashed runner costs at most a few needless notifications.
-- - the barrier (advisory lock 1835100525/3) is taken by enqueue shared and
--   only tried; enqueues_settled tries it exclusively at transaction level,
--   so it is released when that statement ends, whatever interrupts it.

BEGIN;

CREATE UNLOGGED TABLE mailroom.runner_waits (
  pid   integer PRIMARY KEY,
  since timestamptz NOT NULL DEFAULT now()
);
ALTER TABLE mailroom.runner_waits OWNER TO mailroom_owner;
COMMENT ON TABLE mailroom.runner_waits IS
  'Runner sessions waiting for work (by backend pid): enqueue notifies while any is here. UNLOGGED: after a crash every runner reconnects and says so again.';

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

COMMIT;
