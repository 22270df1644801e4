-- Deploy mailroom:runner_warnings to pg
-- requires: view_runner_status
-- requires: view_queue_stats

BEGIN;

-- Warnings about runners, in the shape of queue_stats' warning rows so
-- `mailroom status` lists both together. A function rather than more rows in
-- queue_stats: the queue's view stays the queue's (and is reworked on its own),
-- and queue_stats is read only when no live runner serves every sender.
CREATE FUNCTION mailroom.runner_warnings()
RETURNS TABLE (warning text, messages bigint, oldest_age interval, detail text)
LANGUAGE plpgsql STABLE
SECURITY DEFINER
SET search_path = mailroom, pg_temp
AS $$
BEGIN
  -- A live runner whose relay is down claims nothing: its share of the mail waits.
  RETURN QUERY
  SELECT 'relay_down'::text, NULL::bigint, now() - s.relay_down_since,
         format('runner %s on %s cannot reach its SMTP relay (down for %s: %s); it claims nothing and probes with backoff: check the relay, its address and credentials',
                s.worker, s.host, date_trunc('second', now() - s.relay_down_since), coalesce(s.relay_error, 'no reason given'))
  FROM mailroom.runner_status s
  WHERE s.alive AND NOT s.relay_up
  ORDER BY s.worker;

  IF EXISTS (SELECT FROM mailroom.runner_status s WHERE s.alive AND s.sender IS NULL) THEN
    RETURN;  -- a live runner serves every sender
  END IF;
  RETURN QUERY
  SELECT 'no_live_runner'::text, sum(q.due)::bigint, max(q.oldest_due_age),
         format('%s mail(s) of sender %s are due and no live runner serves it%s: start runners (mailroom run), or see mailroom.runner_status for the last ones seen',
                sum(q.due), q.sender,
                CASE WHEN max(q.oldest_due_age) >= interval '1 second'
                     THEN ', the oldest waiting for ' || date_trunc('second', max(q.oldest_due_age)) ELSE '' END)
  FROM mailroom.queue_stats q
  WHERE q.kind = 'queue' AND q.due > 0
    AND NOT EXISTS (SELECT FROM mailroom.runner_status s WHERE s.alive AND s.sender = q.sender)
  GROUP BY q.sender
  ORDER BY q.sender;
END
$$;
ALTER FUNCTION mailroom.runner_warnings() OWNER TO mailroom_owner;
REVOKE ALL ON FUNCTION mailroom.runner_warnings() FROM PUBLIC;
GRANT EXECUTE ON FUNCTION mailroom.runner_warnings() TO mailroom_operator;
COMMENT ON FUNCTION mailroom.runner_warnings() IS
  'Operators: warnings about runners, shaped like queue_stats'' warning rows: relay_down (a live runner cannot reach its SMTP relay), no_live_runner (mail of a sender is due and no live runner serves it; messages = due mail, oldest_age = the oldest one''s wait).';

COMMIT;
