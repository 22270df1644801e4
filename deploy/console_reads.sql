-- Deploy mailroom:console_reads to pg
-- requires: split_messages
-- requires: table_campaign_backlog
-- requires: attempts_claimed_at_brin
-- requires: send_rates
-- requires: table_domain_budgets
-- requires: table_suppressions
-- requires: table_schedules
-- requires: table_senders
-- requires: table_domain_limits
-- requires: campaign_control
-- requires: attempts_finished_at_idx
-- requires: message_lookup
-- requires: feedback_message_id_matches

-- The operator console (mailroom web) connects as a login that holds
-- mailroom_operator and nothing more, so everything it shows that the
-- existing views do not must come through a narrow SECURITY DEFINER read:
-- throughput series, failures per sender, overdue counts, send-rate limits and their use, a suppression search,
-- the schedules, a message search by recipient or Message-ID, and the
-- campaigns' progress. Each is
-- bounded (a window of the ledger, a LIMIT, a scan of the latest mail), so
-- a page costs the same over a year of history as over a day.

BEGIN;

CREATE OR REPLACE FUNCTION mailroom._throughput(
  p_window interval    DEFAULT '1 hour',
  p_bucket interval    DEFAULT '1 minute',
  p_now    timestamptz DEFAULT now()
)
RETURNS TABLE (bucket_start timestamptz, sent bigint, retried bigint, failed bigint)
LANGUAGE plpgsql STABLE
SECURITY DEFINER
SET search_path = mailroom, pg_temp
-- The ledger is written in claim order, so the claimed_at BRIN index finds
-- a day's rows in a few hundred pages; but the planner prices a BRIN scan
-- as if it matched every row and reads the whole ledger instead (250 ms
-- over a million attempts, against 40 by the index).
SET enable_seqscan = off
AS $$
BEGIN
  IF p_bucket IS NULL OR p_bucket < interval '1 minute' OR p_bucket > interval '1 day' THEN
    RAISE EXCEPTION 'mailroom: bucket: must be between 1 minute and 1 day, got %', coalesce(p_bucket::text, 'NULL')
      USING ERRCODE = '22023';
  END IF;
  IF p_window IS NULL OR p_window < p_bucket OR p_window > 1440 * p_bucket THEN
    RAISE EXCEPTION 'mailroom: window: must be between one bucket and 1440 buckets (%), got %', p_bucket, coalesce(p_window::text, 'NULL')
      USING ERRCODE = '22023';
  END IF;
  IF p_now IS NULL THEN
    RAISE EXCEPTION 'mailroom: now: must not be NULL' USING ERRCODE = '22023';
  END IF;
  -- The window's ledger rows alone, found by the claimed_at BRIN index: no
  -- sender (that is a contents probe per attempt, most of the cost on a
  -- busy day; failures_by_sender probes for the failed ones only). Buckets
  -- are aligned to the epoch (whole minutes, whole hours), the first being
  -- the one that holds p_now - p_window, so a chart drawn a minute later
  -- shows the same bars moved by one.
  RETURN QUERY
  SELECT date_bin(p_bucket, a.claimed_at, timestamptz '1970-01-01 00:00:00+00'),
         count(*) FILTER (WHERE a.outcome = 'sent' AND NOT a.duplicate),
         count(*) FILTER (WHERE a.outcome IN ('retry', 'expired')),
         count(*) FILTER (WHERE a.outcome = 'failed')
  FROM mailroom.attempts a
  WHERE a.claimed_at >= date_bin(p_bucket, p_now - p_window, timestamptz '1970-01-01 00:00:00+00')
    AND a.claimed_at <= p_now
    AND a.outcome IN ('sent', 'retry', 'expired', 'failed')
  GROUP BY 1
  ORDER BY 1;
END
$$;
ALTER FUNCTION mailroom._throughput(interval, interval, timestamptz) OWNER TO mailroom_owner;
REVOKE ALL ON FUNCTION mailroom._throughput(interval, interval, timestamptz) FROM PUBLIC;
COMMENT ON FUNCTION mailroom._throughput(interval, interval, timestamptz) IS
  'Owner only (tests pin the clock): mailroom.throughput over the window ending at p_now.';

CREATE OR REPLACE FUNCTION mailroom.throughput(p_window interval DEFAULT '1 hour', p_bucket interval DEFAULT '1 minute')
RETURNS TABLE (bucket_start timestamptz, sent bigint, retried bigint, failed bigint)
LANGUAGE sql STABLE
SECURITY DEFINER
SET search_path = mailroom, pg_temp
AS $$
  SELECT * FROM mailroom._throughput(p_window, p_bucket, now())
$$;
ALTER FUNCTION mailroom.throughput(interval, interval) OWNER TO mailroom_owner;
REVOKE ALL ON FUNCTION mailroom.throughput(interval, interval) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION mailroom.throughput(interval, interval) TO mailroom_operator;
COMMENT ON FUNCTION mailroom.throughput(interval, interval) IS
  'Operators: attempts of all senders per bucket (epoch-aligned, p_bucket long, 1 minute to 1 day) over the last p_window (at most 1440 buckets), by the time they were claimed: sent (first sends, not duplicates), retried (retry or lease expired), failed. Buckets without attempts are left out.';

CREATE OR REPLACE FUNCTION mailroom.failures_by_sender(p_window interval DEFAULT '1 day')
RETURNS TABLE (sender text, failed bigint)
LANGUAGE plpgsql STABLE
SECURITY DEFINER
SET search_path = mailroom, pg_temp
-- The window's failed attempts (claimed_at BRIN index) find their sender by
-- a primary-key probe of contents each: a hash join would read all of
-- contents, the whole history.
SET enable_hashjoin = off
SET enable_mergejoin = off
-- And the window by that index, not a read of the whole ledger (see _throughput).
SET enable_seqscan = off
AS $$
BEGIN
  IF p_window IS NULL OR p_window <= interval '0' OR p_window > interval '31 days' THEN
    RAISE EXCEPTION 'mailroom: window: must be more than 0 and at most 31 days, got %', coalesce(p_window::text, 'NULL')
      USING ERRCODE = '22023';
  END IF;
  RETURN QUERY
  SELECT c.sender, count(*)
  FROM mailroom.attempts a
  CROSS JOIN LATERAL (SELECT c.sender FROM mailroom.contents c WHERE c.id = a.message_id OFFSET 0) c
  WHERE a.claimed_at > now() - p_window AND a.outcome = 'failed'
  GROUP BY c.sender
  ORDER BY c.sender;
END
$$;
ALTER FUNCTION mailroom.failures_by_sender(interval) OWNER TO mailroom_owner;
REVOKE ALL ON FUNCTION mailroom.failures_by_sender(interval) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION mailroom.failures_by_sender(interval) TO mailroom_operator;
COMMENT ON FUNCTION mailroom.failures_by_sender(interval) IS
  'Operators: failed attempts per sender claimed in the last p_window (at most 31 days).';

CREATE OR REPLACE FUNCTION mailroom.overdue_counts(p_after interval DEFAULT '1 minute')
RETURNS TABLE (sender text, overdue bigint, oldest_overdue interval)
LANGUAGE plpgsql STABLE
SECURITY DEFINER
SET search_path = mailroom, pg_temp
AS $$
BEGIN
  IF p_after IS NULL OR p_after < interval '0' OR p_after > interval '30 days' THEN
    RAISE EXCEPTION 'mailroom: after: must be between 0 and 30 days, got %', coalesce(p_after::text, 'NULL')
      USING ERRCODE = '22023';
  END IF;
  -- The hot queue (the overdue view also reads each mail's contents row,
  -- which costs a probe per due mail for a count that needs none), plus
  -- campaign mail not queued yet (deploy/campaign_chunks.sql) whose
  -- campaign's send_at is that long past, counted by its backlog row.
  RETURN QUERY
  SELECT o.sender, sum(o.overdue)::bigint, now() - min(o.since)
  FROM (SELECT q.sender, count(*) AS overdue, min(q.run_at) AS since
        FROM mailroom.queue q
        WHERE q.status = 'queued' AND q.run_at <= now() - p_after
        GROUP BY q.sender
        UNION ALL
        SELECT k.sender, b.unqueued, k.send_at
        FROM mailroom.campaign_backlog b
        JOIN mailroom.campaigns k ON k.id = b.campaign_id
        WHERE b.unqueued > 0 AND k.status = 'active' AND k.send_at <= now() - p_after) o
  GROUP BY o.sender
  ORDER BY o.sender;
END
$$;
ALTER FUNCTION mailroom.overdue_counts(interval) OWNER TO mailroom_owner;
REVOKE ALL ON FUNCTION mailroom.overdue_counts(interval) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION mailroom.overdue_counts(interval) TO mailroom_operator;
COMMENT ON FUNCTION mailroom.overdue_counts(interval) IS
  'Operators: per sender, queued mail due for longer than p_after (default a minute: runners should have taken it by then) and how long the oldest has waited; from the hot queue, plus campaign mail not queued yet whose campaign''s send_at is that long past (from the backlog rows'' counts).';

CREATE OR REPLACE FUNCTION mailroom.send_rate_usage()
RETURNS TABLE (kind text, name text, max_per_second integer, max_per_minute integer,
               used_last_second integer, used_last_minute integer)
LANGUAGE sql STABLE
SECURITY DEFINER
SET search_path = mailroom, pg_temp
AS $$
  -- Use is read from the sliding windows claim_batch spends (senders:
  -- mailroom.rate_limits, keys mailroom/sender/<name>/s and /m; domains:
  -- mailroom.domain_budgets, one row with both windows), counted as
  -- claim_batch counts them.
  WITH limits AS (
    SELECT 'sender'::text AS kind, s.name, s.max_per_second, s.max_per_minute FROM mailroom.senders s
    UNION ALL
    SELECT 'domain', d.domain, d.max_per_second, d.max_per_minute FROM mailroom.domain_limits d
    UNION ALL
    -- Domains spending the default ('*') row's budget, each on its own: the
    -- ones with a window still alive, at most 200 (the busiest matter).
    SELECT 'domain', x.domain, d.max_per_second, d.max_per_minute
    FROM (SELECT b.domain FROM mailroom.domain_budgets b WHERE b.expires_at > now() LIMIT 200) x
    JOIN mailroom.domain_limits d ON d.domain = '*'
    WHERE NOT EXISTS (SELECT FROM mailroom.domain_limits o WHERE o.domain = x.domain)
  )
  SELECT l.kind, l.name, l.max_per_second, l.max_per_minute,
         CASE l.kind
           WHEN 'sender' THEN
             (SELECT u.used FROM mailroom.rate_limits r,
                     mailroom._rate_slots_used(r.slots, r.slot_hits, mailroom._rate_slot(now(), interval '1 second')) u
              WHERE r.key = 'mailroom/sender/' || l.name || '/s' AND r.algorithm = 'sliding'
                AND r.window_length = interval '1 second')
           ELSE (SELECT mailroom._window_used(b.second_slots, b.second_counts, mailroom._rate_slot(now(), interval '1 second'))::integer
                 FROM mailroom.domain_budgets b WHERE b.domain = l.name AND cardinality(b.second_slots) > 0)
         END,
         CASE l.kind
           WHEN 'sender' THEN
             (SELECT u.used FROM mailroom.rate_limits r,
                     mailroom._rate_slots_used(r.slots, r.slot_hits, mailroom._rate_slot(now(), interval '1 minute')) u
              WHERE r.key = 'mailroom/sender/' || l.name || '/m' AND r.algorithm = 'sliding'
                AND r.window_length = interval '1 minute')
           ELSE (SELECT mailroom._window_used(b.minute_slots, b.minute_counts, mailroom._rate_slot(now(), interval '1 minute'))::integer
                 FROM mailroom.domain_budgets b WHERE b.domain = l.name AND cardinality(b.minute_slots) > 0)
         END
  FROM limits l
  ORDER BY 1 DESC, l.name = '*' DESC, 2
$$;
ALTER FUNCTION mailroom.send_rate_usage() OWNER TO mailroom_owner;
REVOKE ALL ON FUNCTION mailroom.send_rate_usage() FROM PUBLIC;
GRANT EXECUTE ON FUNCTION mailroom.send_rate_usage() TO mailroom_operator;
COMMENT ON FUNCTION mailroom.send_rate_usage() IS
  'Operators: the send-rate limits (senders, then domains: ''*'' is the default each domain without a row gets, listed again for up to 200 domains spending it now) with what claim_batch has spent of them in the last second and minute (sliding windows; NULL = nothing spent lately, or no window kept for an unlimited one).';

CREATE OR REPLACE FUNCTION mailroom.suppression_search(p_query text DEFAULT NULL, p_limit integer DEFAULT 100)
RETURNS SETOF mailroom.suppressions
LANGUAGE plpgsql STABLE
SECURITY DEFINER
SET search_path = mailroom, pg_temp
AS $$
DECLARE
  v_query text := nullif(lower(btrim(p_query)), '');
BEGIN
  IF p_limit IS NULL OR p_limit < 1 OR p_limit > 1000 THEN
    RAISE EXCEPTION 'mailroom: limit: must be between 1 and 1000, got %', coalesce(p_limit::text, 'NULL')
      USING ERRCODE = '22023';
  END IF;
  IF length(v_query) > 320 THEN
    RAISE EXCEPTION 'mailroom: query: at most 320 characters, got %', length(v_query) USING ERRCODE = '22023';
  END IF;
  -- A substring of the address (case-insensitive), or a reason or
  -- source named exactly; newest first. Whole rows, so a column added to
  -- the table (a stream scope) shows without a new function. Each way of
  -- matching reads its own index newest first and stops at p_limit
  -- (deploy/operator_read_indexes.sql: created_at, reason, lower(source),
  -- and a trigram index of the address for the substring, as LIKE with
  -- % and _ escaped): the cost follows p_limit and the matches, not the
  -- length of the list (a sort of all of it for every page before: 0.4 ms
  -- over 1,000 suppressions, 7 to 30 ms over 50,000). EXECUTE: planned
  -- for the query at hand (a rare substring by the trigram index, a
  -- common one by created_at), never a generic plan.
  IF v_query IS NULL THEN
    RETURN QUERY
    SELECT s.* FROM mailroom.suppressions s ORDER BY s.created_at DESC, s.address_key LIMIT p_limit;
    RETURN;
  END IF;
  RETURN QUERY EXECUTE
    $q$
    SELECT u.* FROM (
      (SELECT s.* FROM mailroom.suppressions s WHERE lower(s.address) LIKE $1
       ORDER BY s.created_at DESC, s.address_key LIMIT $3)
      UNION
      (SELECT s.* FROM mailroom.suppressions s WHERE s.reason = $2
       ORDER BY s.created_at DESC, s.address_key LIMIT $3)
      UNION
      (SELECT s.* FROM mailroom.suppressions s WHERE lower(s.source) = $2
       ORDER BY s.created_at DESC, s.address_key LIMIT $3)
    ) u
    ORDER BY u.created_at DESC, u.address_key
    LIMIT $3
    $q$
    USING '%' || replace(replace(replace(v_query, '\', '\\'), '%', '\%'), '_', '\_') || '%', v_query, p_limit;
END
$$;
ALTER FUNCTION mailroom.suppression_search(text, integer) OWNER TO mailroom_owner;
REVOKE ALL ON FUNCTION mailroom.suppression_search(text, integer) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION mailroom.suppression_search(text, integer) TO mailroom_operator;
COMMENT ON FUNCTION mailroom.suppression_search(text, integer) IS
  'Operators: suppressions whose address contains p_query (case-insensitive), or whose reason or source is p_query; newest first, at most p_limit (1..1000). NULL or empty: the newest.';

CREATE OR REPLACE FUNCTION mailroom.schedule_list(p_limit integer DEFAULT 200)
RETURNS TABLE (schedule_key text, to_address text, time_zone text, rule text, template_key text, sender text,
               priority smallint, window_start time, window_end time, active boolean,
               next_run_at timestamptz, last_run_at timestamptz, updated_at timestamptz)
LANGUAGE plpgsql STABLE
SECURITY DEFINER
SET search_path = mailroom, pg_temp
AS $$
BEGIN
  IF p_limit IS NULL OR p_limit < 1 OR p_limit > 10000 THEN
    RAISE EXCEPTION 'mailroom: limit: must be between 1 and 10000, got %', coalesce(p_limit::text, 'NULL')
      USING ERRCODE = '22023';
  END IF;
  -- Not the template variables: they are the application's data.
  RETURN QUERY
  SELECT s.schedule_key, s.to_address, s.time_zone, s.rule, s.template_key, s.sender, s.priority,
         s.window_start, s.window_end, s.active, s.next_run_at, s.last_run_at, s.updated_at
  FROM mailroom.schedules s
  ORDER BY s.active DESC, s.next_run_at NULLS LAST, s.schedule_key
  LIMIT p_limit;
END
$$;
ALTER FUNCTION mailroom.schedule_list(integer) OWNER TO mailroom_owner;
REVOKE ALL ON FUNCTION mailroom.schedule_list(integer) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION mailroom.schedule_list(integer) TO mailroom_operator;
COMMENT ON FUNCTION mailroom.schedule_list(integer) IS
  'Operators: the recurring schedules, active ones first by next run, at most p_limit (1..10000); without their template variables.';

CREATE OR REPLACE FUNCTION mailroom.find_messages(p_query text, p_scan integer DEFAULT 100000)
RETURNS TABLE (id bigint, delivery_key text, to_address text, sender text, campaign_id bigint,
               created_at timestamptz, matched_by text)
LANGUAGE plpgsql STABLE
SECURITY DEFINER
SET search_path = mailroom, pg_temp
AS $$
DECLARE
  v_query  text := btrim(p_query);
  v_newest bigint;
BEGIN
  IF v_query IS NULL OR v_query = '' OR length(v_query) > 998 THEN
    RAISE EXCEPTION 'mailroom: query: an id, delivery key, Message-ID or recipient of 1 to 998 characters is required'
      USING ERRCODE = '22023';
  END IF;
  IF p_scan IS NULL OR p_scan < 1 OR p_scan > 10000000 THEN
    RAISE EXCEPTION 'mailroom: scan: must be between 1 and 10000000, got %', coalesce(p_scan::text, 'NULL')
      USING ERRCODE = '22023';
  END IF;
  -- A delivery key, then an id: one index probe each, over all of history.
  RETURN QUERY
  SELECT c.id, c.delivery_key, c.to_address, c.sender, c.campaign_id, c.created_at, 'delivery_key'::text
  FROM mailroom.contents c WHERE c.delivery_key = v_query;
  IF FOUND THEN
    RETURN;
  END IF;
  IF v_query ~ '^[0-9]{1,18}$' THEN
    RETURN QUERY
    SELECT c.id, c.delivery_key, c.to_address, c.sender, c.campaign_id, c.created_at, 'id'::text
    FROM mailroom.contents c WHERE c.id = v_query::bigint;
    IF FOUND THEN
      RETURN;
    END IF;
  END IF;
  -- A Message-ID the runner wrote (<digest.id@domain>, with or without the
  -- brackets or the domain): message_by_message_id, by id, over all of
  -- history. The v0.3 form without the id (<digest@domain>) cannot be found
  -- without an index of digests; it is searched for as a recipient, in vain.
  IF (SELECT quoted.mail_id IS NOT NULL FROM mailroom._message_id_parts(v_query) AS quoted) THEN
    RETURN QUERY
    SELECT c.id, c.delivery_key, c.to_address, c.sender, c.campaign_id, c.created_at, 'message_id'::text
    FROM mailroom.contents c
    WHERE c.id = mailroom.message_by_message_id(v_query);
    RETURN;
  END IF;
  -- A recipient among the latest p_scan mails by id, newest first: by
  -- contents_recipient_idx (lower(to_address), id), so the cost follows the
  -- matches, not p_scan (a scan of the newest 100,000 mails for each search
  -- before: 5 ms on a day's mail, 30 ms once the history is longer).
  SELECT max(c.id) INTO v_newest FROM mailroom.contents c;
  RETURN QUERY
  SELECT c.id, c.delivery_key, c.to_address, c.sender, c.campaign_id, c.created_at, 'recipient'::text
  FROM mailroom.contents c
  WHERE c.id > v_newest - p_scan AND lower(c.to_address) = lower(v_query)
  ORDER BY c.id DESC LIMIT 100;
END
$$;
ALTER FUNCTION mailroom.find_messages(text, integer) OWNER TO mailroom_owner;
REVOKE ALL ON FUNCTION mailroom.find_messages(text, integer) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION mailroom.find_messages(text, integer) TO mailroom_operator;
COMMENT ON FUNCTION mailroom.find_messages(text, integer) IS
  'Operators: mail by delivery key, id or Message-ID (<digest.id@domain>, as the runner writes it; message_by_message_id) at any age, else by recipient address (case-insensitive, newest 100) among the latest p_scan mails; matched_by says which. inspect(id) shows one with its ledger.';

-- The campaigns page. campaign_progress joins every campaign's contents to
-- the queue and to its finishing ledger rows on each read, O(history of its
-- campaigns): over a sent campaign of a million that is seconds. This reads
-- what a progress bar, a rate and an ETA need from bounded sources instead:
-- the total from mailroom.campaign_mail_counts (kept by enqueue_campaign),
-- the live counts from the hot queue (its rows carry their campaign:
-- O(live mail)), finished = total - live, and the last
-- minute's sends from attempts_finished_at_idx. The ETA and its note are
-- campaign_progress's: both call mailroom._campaign_eta (pgTAP checks the two agree).
CREATE OR REPLACE FUNCTION mailroom.campaign_summaries(p_limit integer DEFAULT 200)
RETURNS TABLE (campaign_id bigint, name text, status text, priority smallint, send_at timestamptz,
               total bigint, finished bigint, queued bigint, paused bigint, sending bigint, review bigint,
               sent_last_minute bigint, send_rate_per_second numeric, oldest_queued_age interval, eta interval,
               created_at timestamptz, finished_at timestamptz, due bigint, waiting bigint,
               next_due_at timestamptz, eta_note text)
LANGUAGE plpgsql STABLE
SECURITY DEFINER
SET search_path = mailroom, pg_temp
-- The planner prices the per-campaign counts as if each campaign were as
-- big as all of them, and JIT-compiling for that costs seconds on a read of
-- tens of milliseconds.
SET jit = off
AS $$
BEGIN
  IF p_limit IS NULL OR p_limit < 1 OR p_limit > 1000 THEN
    RAISE EXCEPTION 'mailroom: limit: must be between 1 and 1000, got %', coalesce(p_limit::text, 'NULL')
      USING ERRCODE = '22023';
  END IF;
  RETURN QUERY
  WITH k AS MATERIALIZED (
    SELECT * FROM mailroom.campaigns k ORDER BY k.id DESC LIMIT p_limit
  ),
  -- The hot queue alone: its rows carry their campaign (a join with
  -- contents read the campaigns' contents, finished mail too).
  live AS (
    SELECT q.campaign_id,
           count(*) FILTER (WHERE q.status = 'queued') AS queued,
           count(*) FILTER (WHERE q.status = 'paused') AS paused,
           count(*) FILTER (WHERE q.status = 'sending') AS sending,
           count(*) FILTER (WHERE q.status = 'review') AS review,
           min(q.run_at) FILTER (WHERE q.status = 'queued' AND q.run_at <= now()) AS oldest_due,
           count(*) FILTER (WHERE q.status = 'queued' AND q.run_at <= now()) AS due,
           count(*) FILTER (WHERE q.status = 'queued' AND q.run_at > now()) AS waiting,
           min(q.run_at) FILTER (WHERE q.status = 'queued' AND q.run_at > now()) AS next_due_at,
           max(q.run_at) FILTER (WHERE q.status = 'queued' AND q.run_at > now()) AS last_due_at
    FROM mailroom.queue q
    WHERE q.campaign_id IS NOT NULL
    GROUP BY q.campaign_id
  ),
  recent AS (
    SELECT c.campaign_id, count(*) AS sent_last_minute
    FROM mailroom.attempts f
    CROSS JOIN LATERAL (SELECT c.campaign_id FROM mailroom.contents c WHERE c.id = f.message_id OFFSET 0) c
    WHERE f.finished_as = 'sent' AND f.finished_at > now() - interval '1 minute'
      AND c.campaign_id >= (SELECT min(k.id) FROM k)
    GROUP BY c.campaign_id
  ),
  s AS (
    SELECT k.*, t.total,
           coalesce(l.queued, 0) + CASE WHEN k.status <> 'paused' THEN u.unqueued ELSE 0 END AS queued,
           coalesce(l.paused, 0) + CASE WHEN k.status = 'paused' THEN u.unqueued ELSE 0 END AS paused,
           coalesce(l.sending, 0) AS sending, coalesce(l.review, 0) AS review,
           l.oldest_due,
           coalesce(l.due, 0) + CASE WHEN k.status = 'active' AND k.send_at <= now() THEN u.unqueued ELSE 0 END AS due,
           coalesce(l.waiting, 0) + CASE WHEN k.status = 'active' AND k.send_at > now() THEN u.unqueued ELSE 0 END AS waiting,
           CASE WHEN k.status = 'active' AND k.send_at > now() AND u.unqueued > 0
                THEN least(l.next_due_at, k.send_at) ELSE l.next_due_at END AS next_due_at,
           CASE WHEN k.status = 'active' AND k.send_at > now() AND u.unqueued > 0
                THEN greatest(l.last_due_at, k.send_at) ELSE l.last_due_at END AS last_due_at,
           coalesce(r.sent_last_minute, 0) AS sent_last_minute
    FROM k
    -- The campaign's size as enqueue_campaign counted it: one row (an
    -- index-only count of contents_campaign_idx was O(the campaign), 20 ms
    -- for 205,000 mails).
    CROSS JOIN LATERAL (SELECT coalesce((SELECT m.mails FROM mailroom.campaign_mail_counts m
                                         WHERE m.campaign_id = k.id), 0) AS total) t
    -- Mail not queued yet (deploy/campaign_chunks.sql) counts as queued (as
    -- paused while the campaign is): the backlog row keeps how many, mail an
    -- operator cancelled before its chunk already taken off (that one is
    -- finished, as campaign_progress says), so no count above the cursor.
    CROSS JOIN LATERAL (SELECT coalesce((SELECT b.unqueued FROM mailroom.campaign_backlog b
                                         WHERE b.campaign_id = k.id), 0) AS unqueued) u
    LEFT JOIN live l ON l.campaign_id = k.id
    LEFT JOIN recent r ON r.campaign_id = k.id
  )
  SELECT s.id, s.name,
         CASE WHEN s.status = 'active' AND s.queued + s.sending + s.paused = 0 THEN 'done' ELSE s.status END,
         s.priority, s.send_at,
         s.total, s.total - (s.queued + s.paused + s.sending + s.review),
         s.queued, s.paused, s.sending, s.review,
         s.sent_last_minute,
         round(s.sent_last_minute / 60.0, 2),
         now() - s.oldest_due,
         e.eta,  -- campaign_progress's, from the same function
         s.created_at, s.finished_at, s.due, s.waiting, s.next_due_at,
         e.eta_note
  FROM s
  CROSS JOIN LATERAL mailroom._campaign_eta(s.status, s.queued, s.sending, s.due, s.waiting, s.sent_last_minute,
                                            s.next_due_at, s.last_due_at) e
  ORDER BY s.id DESC;
END
$$;
ALTER FUNCTION mailroom.campaign_summaries(integer) OWNER TO mailroom_owner;
REVOKE ALL ON FUNCTION mailroom.campaign_summaries(integer) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION mailroom.campaign_summaries(integer) TO mailroom_operator;
COMMENT ON FUNCTION mailroom.campaign_summaries(integer) IS
  'Operators: the latest p_limit campaigns (1..1000), newest first, as campaign_progress shows them (status, live counts, rate, ETA and eta_note) but with finished = total - live in place of sent/failed/cancelled; costs O(live mail + the last minute''s ledger), not O(history) nor O(the campaigns'' size).';

COMMIT;
