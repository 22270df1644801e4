-- Deploy mailroom:sender_warmup to pg
-- requires: table_senders
-- requires: streams
-- requires: set_setting_typed
-- requires: roles

-- Warm-up schedules per sender (issue 30, item 2). A new sending domain
-- must ramp up over weeks: a day's budget of mails per sender, growing by a
-- schedule, enforced at claim time (claim_batch) like every other rule.
--
-- Day 1 is the schedule's start date; days are UTC calendar days of the
-- database clock. Day d's budget is ramp[d]; after the ramp's last day the
-- warm-up is over and the sender is limited only by its send rates. The
-- default ramp (warmup_default_ramp below) is the common advice for a new
-- IP or domain: 50, 100, 500, 1,000, 5,000, 10,000, 20,000, 40,000, 70,000,
-- 100,000 a day.
--
-- Transactional first: broadcast mail (a stream with unsubscribe headers)
-- may use the day's budget only while more than warmup_transactional_reserve
-- (10 %) of it is left; below that, it waits (re-timed warmup_hold ahead,
-- 5 minutes, so that it leaves the head of the queue) and only
-- transactional mail goes, until the budget is spent. The next day it goes
-- again.
--
-- Per sender, not per sending IP: mailroom hands mail to one relay, and an
-- SMTP relay does not say which IP it will send from (no reply carries
-- it), so a per-IP schedule would be a guess. Operators who map senders to
-- IPs at the relay (a sender per IP pool) get per-IP warm-up that way.

BEGIN;

INSERT INTO mailroom.settings (key, value, description) VALUES
  ('warmup_transactional_reserve', '0.1',
   'Warm-up: the share of a sender''s day budget kept for transactional mail: broadcast mail waits once no more than this is left.'),
  ('warmup_hold', '5 minutes',
   'Warm-up: how far claim_batch re-times broadcast mail the transactional reserve holds back.')
ON CONFLICT (key) DO NOTHING;

CREATE TABLE mailroom.sender_warmups (
  sender     text NOT NULL,
  started_on date NOT NULL,
  ramp       integer[] NOT NULL,
  used_on    date,
  used       integer NOT NULL DEFAULT 0,
  updated_at timestamptz NOT NULL DEFAULT now(),
  CONSTRAINT sender_warmups_pkey PRIMARY KEY (sender),
  CONSTRAINT sender_warmups_sender_length CHECK (length(sender) BETWEEN 1 AND 200),
  CONSTRAINT sender_warmups_ramp_shape CHECK (cardinality(ramp) BETWEEN 1 AND 366 AND array_position(ramp, NULL) IS NULL
                                                AND 0 < ALL (ramp))
);
ALTER TABLE mailroom.sender_warmups OWNER TO mailroom_owner;
REVOKE ALL ON mailroom.sender_warmups FROM PUBLIC;
COMMENT ON TABLE mailroom.sender_warmups IS
  'Warm-up schedules per sender: claim_batch grants the sender no more than ramp[day] mails on day day (day 1 = started_on, UTC days), transactional mail first. Operators set them with set_sender_warmup and read sender_warmup_status().';
COMMENT ON COLUMN mailroom.sender_warmups.ramp IS 'Mails per day: ramp[1] on the start date, ramp[2] the day after, ...; past its end the warm-up is over.';
COMMENT ON COLUMN mailroom.sender_warmups.used_on IS 'The UTC day used counts (claims on another day start from 0).';
COMMENT ON COLUMN mailroom.sender_warmups.used IS 'Mails claimed on used_on.';

CREATE FUNCTION mailroom.warmup_default_ramp()
RETURNS integer[]
LANGUAGE sql IMMUTABLE
SECURITY DEFINER
SET search_path = mailroom, pg_temp
AS $$ SELECT ARRAY[50, 100, 500, 1000, 5000, 10000, 20000, 40000, 70000, 100000] $$;
ALTER FUNCTION mailroom.warmup_default_ramp() OWNER TO mailroom_owner;
REVOKE ALL ON FUNCTION mailroom.warmup_default_ramp() FROM PUBLIC;
GRANT EXECUTE ON FUNCTION mailroom.warmup_default_ramp() TO mailroom_operator;
COMMENT ON FUNCTION mailroom.warmup_default_ramp() IS
  'The ramp set_sender_warmup uses when given none: 50, 100, 500, 1000, 5000, 10000, 20000, 40000, 70000, 100000 mails a day.';

-- A sender's day, budget and what is left at p_now (p_day is the UTC day).
-- Plain SQL: inlined into its readers.
CREATE FUNCTION mailroom._warmup_day(p_started_on date, p_ramp integer[], p_used_on date, p_used integer, p_today date)
RETURNS TABLE (day integer, budget integer, used integer)
LANGUAGE sql IMMUTABLE
AS $$
  SELECT (p_today - p_started_on) + 1,
         p_ramp[(p_today - p_started_on) + 1],
         CASE WHEN p_used_on = p_today THEN p_used ELSE 0 END
$$;
ALTER FUNCTION mailroom._warmup_day(date, integer[], date, integer, date) OWNER TO mailroom_owner;
REVOKE ALL ON FUNCTION mailroom._warmup_day(date, integer[], date, integer, date) FROM PUBLIC;
COMMENT ON FUNCTION mailroom._warmup_day(date, integer[], date, integer, date) IS
  'Internal: a warm-up''s day number on p_today (1 on its start date), that day''s budget (NULL past the ramp: over) and what was used that day.';

CREATE FUNCTION mailroom.set_sender_warmup(p_sender text, p_ramp integer[] DEFAULT NULL, p_started_on date DEFAULT NULL)
RETURNS void
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = mailroom, pg_temp
AS $$
DECLARE
  v_today date := (now() AT TIME ZONE 'UTC')::date;
  v_ramp  integer[] := coalesce(p_ramp, mailroom.warmup_default_ramp());
BEGIN
  IF p_sender IS NULL OR length(p_sender) NOT BETWEEN 1 AND 200 THEN
    RAISE EXCEPTION 'mailroom: sender: must be 1 to 200 characters' USING ERRCODE = '22023';
  END IF;
  IF cardinality(v_ramp) NOT BETWEEN 1 AND 366 OR array_ndims(v_ramp) <> 1 THEN
    RAISE EXCEPTION 'mailroom: ramp: must list 1 to 366 daily budgets, got %', coalesce(cardinality(v_ramp), 0)
      USING ERRCODE = '22023';
  END IF;
  IF array_position(v_ramp, NULL) IS NOT NULL OR NOT (0 < ALL (v_ramp)) OR NOT (100000000 >= ALL (v_ramp)) THEN
    RAISE EXCEPTION 'mailroom: ramp: every daily budget must be a number from 1 to 100000000, got %', v_ramp
      USING ERRCODE = '22023';
  END IF;
  IF p_started_on > v_today OR p_started_on < v_today - 3660 THEN
    RAISE EXCEPTION 'mailroom: started_on: must be today (UTC, %) or a day of the last ten years, got %', v_today, p_started_on
      USING ERRCODE = '22023';
  END IF;
  INSERT INTO mailroom.sender_warmups AS w (sender, started_on, ramp, updated_at)
  VALUES (p_sender, coalesce(p_started_on, v_today), v_ramp, now())
  ON CONFLICT (sender) DO UPDATE
  SET started_on = EXCLUDED.started_on, ramp = EXCLUDED.ramp, updated_at = now();
END
$$;
ALTER FUNCTION mailroom.set_sender_warmup(text, integer[], date) OWNER TO mailroom_owner;
REVOKE ALL ON FUNCTION mailroom.set_sender_warmup(text, integer[], date) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION mailroom.set_sender_warmup(text, integer[], date) TO mailroom_operator;
COMMENT ON FUNCTION mailroom.set_sender_warmup(text, integer[], date) IS
  'Put a sender on a warm-up schedule: p_ramp mails a day (default warmup_default_ramp()), day 1 = p_started_on (default today, UTC; never in the future). Setting it again keeps what was used today. 22023 for a bad sender, ramp or date.';

CREATE FUNCTION mailroom.clear_sender_warmup(p_sender text)
RETURNS boolean
LANGUAGE sql
SECURITY DEFINER
SET search_path = mailroom, pg_temp
AS $$
  WITH gone AS (DELETE FROM mailroom.sender_warmups w WHERE w.sender = p_sender RETURNING 1)
  SELECT EXISTS (SELECT FROM gone)
$$;
ALTER FUNCTION mailroom.clear_sender_warmup(text) OWNER TO mailroom_owner;
REVOKE ALL ON FUNCTION mailroom.clear_sender_warmup(text) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION mailroom.clear_sender_warmup(text) TO mailroom_operator;
COMMENT ON FUNCTION mailroom.clear_sender_warmup(text) IS 'End a sender''s warm-up schedule now; true if it had one.';

CREATE FUNCTION mailroom.sender_warmup_status()
RETURNS TABLE (sender text, started_on date, day integer, days integer, budget integer, used integer,
               remaining integer, broadcast_remaining integer, done boolean)
LANGUAGE sql STABLE
SECURITY DEFINER
SET search_path = mailroom, pg_temp
AS $$
  SELECT w.sender, w.started_on, d.day, cardinality(w.ramp), d.budget, d.used,
         greatest(0, d.budget - d.used),
         greatest(0, d.budget - d.used - ceil(d.budget * mailroom._setting('warmup_transactional_reserve')::numeric)::integer),
         d.budget IS NULL
  FROM mailroom.sender_warmups w
  CROSS JOIN LATERAL mailroom._warmup_day(w.started_on, w.ramp, w.used_on, w.used, (now() AT TIME ZONE 'UTC')::date) AS d
  ORDER BY w.sender
$$;
ALTER FUNCTION mailroom.sender_warmup_status() OWNER TO mailroom_owner;
REVOKE ALL ON FUNCTION mailroom.sender_warmup_status() FROM PUBLIC;
-- Runners too: they export it as metrics (mailroom/metrics.py).
GRANT EXECUTE ON FUNCTION mailroom.sender_warmup_status() TO mailroom_operator, mailroom_runner;
COMMENT ON FUNCTION mailroom.sender_warmup_status() IS
  'Each sender''s warm-up: its day (1 on the start date) of days, today''s budget, used and remaining, what broadcast mail may still use (above the transactional reserve), done once past the ramp.';

COMMIT;
