-- Deploy mailroom:runner_heartbeat to pg
-- requires: table_runners

-- A runner says it is alive, and how it does, with one upsert written with its
-- outcome flushes (at most about once a second while it works, every
-- heartbeat interval while idle), and says goodbye on a clean stop. Times are
-- the database's clock, never the runner's: hosts' clocks disagree, and
-- runner_status compares last_seen with now().

BEGIN;

CREATE FUNCTION mailroom.runner_heartbeat(
  p_worker      text,
  p_run_id      uuid,
  p_host        text,
  p_pid         integer,
  p_version     text,
  p_sender      text,
  p_concurrency integer,
  p_interval    interval,
  p_in_flight   integer,
  p_sent        bigint,
  p_retried     bigint,
  p_failed      bigint,
  p_ambiguous   bigint,
  p_relay_up    boolean,
  p_relay_error text
)
RETURNS void
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = mailroom, pg_temp
AS $$
DECLARE
  v_now timestamptz := now();
BEGIN
  IF p_worker IS NULL OR char_length(p_worker) NOT BETWEEN 1 AND 200 OR p_worker ~ '[[:cntrl:]]' THEN
    RAISE EXCEPTION 'mailroom: worker: must be 1 to 200 characters without control characters' USING ERRCODE = '22023';
  END IF;
  IF p_run_id IS NULL THEN
    RAISE EXCEPTION 'mailroom: run_id: must not be NULL' USING ERRCODE = '22023';
  END IF;
  IF p_host IS NULL OR char_length(p_host) NOT BETWEEN 1 AND 255 OR p_host ~ '[[:cntrl:]]' THEN
    RAISE EXCEPTION 'mailroom: host: must be 1 to 255 characters without control characters' USING ERRCODE = '22023';
  END IF;
  IF p_pid IS NULL OR p_pid < 1 THEN
    RAISE EXCEPTION 'mailroom: pid: must be a positive integer' USING ERRCODE = '22023';
  END IF;
  IF p_version IS NULL OR char_length(p_version) NOT BETWEEN 1 AND 64 OR p_version ~ '[[:cntrl:]]' THEN
    RAISE EXCEPTION 'mailroom: version: must be 1 to 64 characters without control characters' USING ERRCODE = '22023';
  END IF;
  IF char_length(p_sender) NOT BETWEEN 1 AND 200 OR p_sender ~ '[[:cntrl:]]' THEN
    RAISE EXCEPTION 'mailroom: sender: must be NULL (all senders) or 1 to 200 characters without control characters'
      USING ERRCODE = '22023';
  END IF;
  IF p_concurrency IS NULL OR p_concurrency NOT BETWEEN 1 AND 100000 THEN
    RAISE EXCEPTION 'mailroom: concurrency: must be between 1 and 100000' USING ERRCODE = '22023';
  END IF;
  IF p_interval IS NULL OR p_interval < interval '1 second' OR p_interval > interval '1 hour' THEN
    RAISE EXCEPTION 'mailroom: interval: must be between 1 second and 1 hour' USING ERRCODE = '22023';
  END IF;
  IF p_in_flight IS NULL OR p_in_flight < 0 THEN
    RAISE EXCEPTION 'mailroom: in_flight: must be 0 or more' USING ERRCODE = '22023';
  END IF;
  IF p_sent IS NULL OR p_sent < 0 THEN
    RAISE EXCEPTION 'mailroom: sent: must be 0 or more' USING ERRCODE = '22023';
  END IF;
  IF p_retried IS NULL OR p_retried < 0 THEN
    RAISE EXCEPTION 'mailroom: retried: must be 0 or more' USING ERRCODE = '22023';
  END IF;
  IF p_failed IS NULL OR p_failed < 0 THEN
    RAISE EXCEPTION 'mailroom: failed: must be 0 or more' USING ERRCODE = '22023';
  END IF;
  IF p_ambiguous IS NULL OR p_ambiguous < 0 THEN
    RAISE EXCEPTION 'mailroom: ambiguous: must be 0 or more' USING ERRCODE = '22023';
  END IF;
  IF p_relay_up IS NULL THEN
    RAISE EXCEPTION 'mailroom: relay_up: must be true or false' USING ERRCODE = '22023';
  END IF;
  IF char_length(p_relay_error) > 300 OR p_relay_error ~ '[[:cntrl:]]' THEN
    RAISE EXCEPTION 'mailroom: relay_error: must be at most 300 characters without control characters'
      USING ERRCODE = '22023';
  END IF;
  -- Operators read this text: a URL's userinfo with a password (smtp://user:pw@host)
  -- is refused, whatever the runner's redaction missed; the redacted form
  -- (smtp://user:***@host) passes.
  IF p_relay_error ~ '[[:alpha:]][[:alnum:]+.-]*://[^[:space:]/@]*:(?!\*+@)[^[:space:]/@]+@' THEN
    RAISE EXCEPTION 'mailroom: relay_error: must not contain a URL with a password'
      USING ERRCODE = '22023', HINT = 'Redact the password (smtp://user:***@host) before reporting.';
  END IF;

  INSERT INTO mailroom.runners AS r (
    worker, run_id, host, pid, version, sender, concurrency, heartbeat_interval, started_at, last_seen,
    stopped_at, in_flight, sent, retried, failed, ambiguous, sent_per_second, rate_since, rate_base,
    relay_up, relay_down_since, relay_error)
  VALUES (
    p_worker, p_run_id, p_host, p_pid, p_version, p_sender, p_concurrency, p_interval, v_now, v_now,
    NULL, p_in_flight, p_sent, p_retried, p_failed, p_ambiguous, 0, v_now, p_sent,
    p_relay_up, CASE WHEN NOT p_relay_up THEN v_now END, CASE WHEN NOT p_relay_up THEN p_relay_error END)
  ON CONFLICT (worker) DO UPDATE SET
    run_id = EXCLUDED.run_id,
    host = EXCLUDED.host,
    pid = EXCLUDED.pid,
    version = EXCLUDED.version,
    sender = EXCLUDED.sender,
    concurrency = EXCLUDED.concurrency,
    heartbeat_interval = EXCLUDED.heartbeat_interval,
    -- Another run_id under this name is a restart: it starts over.
    started_at = CASE WHEN r.run_id = EXCLUDED.run_id THEN r.started_at ELSE v_now END,
    last_seen = v_now,
    stopped_at = NULL,
    in_flight = EXCLUDED.in_flight,
    sent = EXCLUDED.sent,
    retried = EXCLUDED.retried,
    failed = EXCLUDED.failed,
    ambiguous = EXCLUDED.ambiguous,
    -- The rate over a sample of at least 5 seconds (or one interval, when the
    -- runner is idle), so two heartbeats a moment apart do not make it jump.
    sent_per_second = CASE
      WHEN r.run_id <> EXCLUDED.run_id THEN 0
      WHEN v_now - r.rate_since >= least(interval '5 seconds', EXCLUDED.heartbeat_interval)
        THEN round(greatest(EXCLUDED.sent - r.rate_base, 0) / extract(epoch FROM v_now - r.rate_since), 1)
      ELSE r.sent_per_second END,
    rate_base = CASE
      WHEN r.run_id <> EXCLUDED.run_id
        OR v_now - r.rate_since >= least(interval '5 seconds', EXCLUDED.heartbeat_interval) THEN EXCLUDED.sent
      ELSE r.rate_base END,
    rate_since = CASE
      WHEN r.run_id <> EXCLUDED.run_id
        OR v_now - r.rate_since >= least(interval '5 seconds', EXCLUDED.heartbeat_interval) THEN v_now
      ELSE r.rate_since END,
    relay_up = EXCLUDED.relay_up,
    relay_down_since = CASE
      WHEN EXCLUDED.relay_up THEN NULL
      WHEN r.run_id = EXCLUDED.run_id AND NOT r.relay_up THEN r.relay_down_since
      ELSE v_now END,
    relay_error = EXCLUDED.relay_error;

  -- Forget runners not seen for a day (crashed, or renamed). Rows another
  -- heartbeat is deleting are skipped, not waited for.
  DELETE FROM mailroom.runners d
  WHERE d.worker IN (SELECT s.worker FROM mailroom.runners s
                     WHERE s.last_seen < v_now - interval '1 day'
                     FOR UPDATE SKIP LOCKED);
END
$$;
ALTER FUNCTION mailroom.runner_heartbeat(text, uuid, text, integer, text, text, integer, interval, integer, bigint, bigint, bigint, bigint, boolean, text)
  OWNER TO mailroom_owner;
REVOKE ALL ON FUNCTION mailroom.runner_heartbeat(text, uuid, text, integer, text, text, integer, interval, integer, bigint, bigint, bigint, bigint, boolean, text)
  FROM PUBLIC;
GRANT EXECUTE ON FUNCTION mailroom.runner_heartbeat(text, uuid, text, integer, text, text, integer, interval, integer, bigint, bigint, bigint, bigint, boolean, text)
  TO mailroom_runner;
COMMENT ON FUNCTION mailroom.runner_heartbeat(text, uuid, text, integer, text, text, integer, interval, integer, bigint, bigint, bigint, bigint, boolean, text) IS
  'Runner: upsert this runner''s row in mailroom.runners (database time; a new run_id under the same worker name starts the counters and started_at over), then forget runners unseen for a day. Counts are since the runner started. Bad input: 22023 naming the field, nothing written.';

CREATE FUNCTION mailroom.runner_gone(p_worker text, p_run_id uuid)
RETURNS boolean
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = mailroom, pg_temp
AS $$
BEGIN
  IF p_worker IS NULL THEN
    RAISE EXCEPTION 'mailroom: worker: must not be NULL' USING ERRCODE = '22023';
  END IF;
  IF p_run_id IS NULL THEN
    RAISE EXCEPTION 'mailroom: run_id: must not be NULL' USING ERRCODE = '22023';
  END IF;
  -- Only this run's row: a process that stops late must not mark its
  -- successor under the same worker name as gone.
  UPDATE mailroom.runners SET stopped_at = now(), last_seen = now()
  WHERE worker = p_worker AND run_id = p_run_id;
  RETURN FOUND;
END
$$;
ALTER FUNCTION mailroom.runner_gone(text, uuid) OWNER TO mailroom_owner;
REVOKE ALL ON FUNCTION mailroom.runner_gone(text, uuid) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION mailroom.runner_gone(text, uuid) TO mailroom_runner;
COMMENT ON FUNCTION mailroom.runner_gone(text, uuid) IS
  'Runner: this run stopped cleanly (stopped_at = now()); runner_status shows it as stopped, not alive. False when the row belongs to another run or is gone.';

COMMIT;
