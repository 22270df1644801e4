-- Revert mailroom:claim_batch from pg: the v0.5.0 functions of the change
-- (deploy/claim_batch@v0.5.0.sql), whose gate works out the HMAC of every
-- pick's address once any address is forgotten, without forgotten_filter.

-- v0.4: the one gate. claim_batch is the only place that decides whether a
-- mail may leave now. Each due candidate is locked (FOR UPDATE SKIP LOCKED)
-- and checked, in the statement that leases it, against what holds at this
-- moment:
--
--   suppressed address            -> finished cancelled, reason suppressed
--   campaign cancelled            -> finished cancelled, campaign_cancelled
--   campaign paused               -> queue status paused
--   sender paused (the breaker)   -> queue status paused, reason sender_paused
--   schedule inactive             -> finished cancelled, schedule_inactive
--   outside its send window       -> run_at moved to the window's next opening
--   sender or domain budget spent -> not claimed (stays queued)
--
-- What fails the gate is never returned; it is moved in the same
-- transaction, while the claim still holds its row locked, by a second
-- statement (_claim_refused) that claims whose mail all passes never run.
-- Under send budgets only the picks meet the gate: a candidate a budget held
-- back is neither leased nor moved (the claim that picks it gates it).
-- Checks made where mail is written
-- (enqueue's suppressed shortcut, pause_campaign, suppress) are shortcuts
-- only: mail re-queued by a retry, reclaim, release or operator meets this
-- gate again, so a suppression or pause decided while it was in flight
-- holds (issue 13, holes 1 and 2).
--
-- The gate reads with the claim's snapshot: mail claimed by a claim that
-- started before a suppression or pause committed may still go out (it was
-- already leaving); nothing claimed by a claim that starts after does. A
-- pause is applied only if the campaign is still paused once its row is
-- locked (FOR SHARE re-reads the newest version), so a resume committing
-- meanwhile cannot leave mail paused behind it.
--
-- v0.4.1: a claim never waits for a lock that an application or an
-- operator can hold (issue 32, item 3). That re-check took its FOR SHARE
-- with a wait: an uncommitted pause_campaign of the paused campaign, a
-- resume_campaign or a resume_sender made every claim that met the
-- campaign's (or sender's) mail wait while holding the leases of the rest
-- of its batch, and with the runner's lock_timeout every claim failed and
-- the next one met the same mail first. Now the re-check skips a locked
-- row (SKIP LOCKED): a mail whose pause cannot be confirmed stays queued,
-- re-timed a few seconds ahead (_claim_recheck_delay) so that it leaves the
-- head of the claim index, and the claim that meets it then gates it again.
-- The rest of the batch goes out. The claim's other locks are its own rows
-- (SKIP LOCKED), campaign backlog rows (SKIP LOCKED) and send-rate rows
-- under the reserved 'mailroom/' keys, which only claims take.
--
-- Plans are generic (made once per session, see the SET clauses), so a
-- statement must not depend on the tables' size when its session first ran
-- it: a join written q.id = g.id, planned while the queue was nearly empty,
-- drives from a whole-index scan of the queue and keeps doing so as the
-- queue grows (7 s a claim at 300,000 queued, in a runner started on an
-- empty queue). A queue or contents row is therefore always matched to the
-- claim's own ids as id = ANY (ARRAY[g.id]): that form cannot drive an
-- ordered scan of the big table, so the claim's few rows drive and each is
-- one index lookup (mark_outcomes and reclaim do the same), or, within the
-- lease, by the ctid already found for it (a pick's by its row lock, its
-- content row's by the gate's lookup).
--
-- Send rates: only the budgets of the senders and domains among the
-- candidates are looked up and locked, in key order, until commit (issue
-- 13, hole 6: v0.3 read every domain mailed in the last minute under one
-- global lock, on every claim). Senders (mailroom.rate_limits) are locked
-- and judged before the candidates are chosen: the lookup hands back each
-- locked row's ctid, and their spend is one update of those rows by ctid.
-- Domains (mailroom.domain_budgets, one row with both windows each) are
-- locked, judged and spent in one statement once the candidates are known
-- (_domain_budgets_spend); what the gate then refuses is given back. A claim
-- whose candidates were held back by a spent domain looks again (at most
-- three rounds) leaving those domains out, so other mail still fills it.
--
-- v0.4.1: learned rates and warm-up (issue 30, items 1 and 2). While a
-- destination group is throttled (mailroom.destination_throttles, learned
-- by mark_outcomes), every candidate whose domain is in it is budgeted under
-- the group's key 'group:<name>' at the lower of the learned rate and its
-- domain's own limits (_throttle_for): one budget for gmail.com,
-- googlemail.com and every Workspace domain the group holds. A sender on a
-- warm-up schedule (mailroom.sender_warmups) is granted no more than what
-- is left of its day's budget: its row is locked with the senders'
-- budgets, transactional mail is granted first, broadcast mail only while
-- more than the transactional reserve is left (what the reserve holds back
-- is re-timed warmup_hold ahead, so that it leaves the head of the queue),
-- and what was claimed is counted before commit. Neither costs a claim
-- anything while nothing is throttled and no sender warms up (two looks
-- at small tables with the settings).
--
-- No p_now on what runners execute (hole 4): claim_batch uses now(); the
-- owner-only _claim_batch takes p_now for tests. Kept from v0.3: a claim is
-- stamped no earlier than the row's last change, so the ledger never shows
-- two overlapping leases of one message; the claim writes no ledger row.

BEGIN;

-- When a mail's send window next opens: p_now when it is open or the mail
-- has none; the campaign's window, else the schedule's, in the recipient's
-- zone when the mail has one, else in the window's own. Plain SQL, inlined
-- into its callers (the gate, and the move of mail the gate holds for its
-- window).
CREATE OR REPLACE FUNCTION mailroom._window_opening(
  p_recipient_zone text,
  p_campaign_zone  text,
  p_campaign_start time,
  p_campaign_end   time,
  p_schedule_zone  text,
  p_schedule_start time,
  p_schedule_end   time,
  p_now            timestamptz
)
RETURNS timestamptz
LANGUAGE sql
STABLE
AS $$
  SELECT CASE
           WHEN p_campaign_start IS NOT NULL
             THEN mailroom._window_open(coalesce(p_recipient_zone, p_campaign_zone), p_campaign_start, p_campaign_end, p_now)
           WHEN p_schedule_start IS NOT NULL
             THEN mailroom._window_open(coalesce(p_recipient_zone, p_schedule_zone), p_schedule_start, p_schedule_end, p_now)
           ELSE p_now
         END
$$;
ALTER FUNCTION mailroom._window_opening(text, text, time, time, text, time, time, timestamptz) OWNER TO mailroom_owner;
REVOKE ALL ON FUNCTION mailroom._window_opening(text, text, time, time, text, time, time, timestamptz) FROM PUBLIC;
COMMENT ON FUNCTION mailroom._window_opening(text, text, time, time, text, time, time, timestamptz) IS
  'Internal (inlined): when a mail''s send window next opens (p_now if open or none): its campaign''s window, else its schedule''s, in the recipient''s zone if known.';

-- The gate's verdict for one mail, from its content row: suppressed,
-- campaign_cancelled, paused, schedule_inactive, window or claim. Plain SQL
-- without SECURITY DEFINER or SET, so that the planner inlines it into the
-- claim; a set-returning function, because only those are inlined with the
-- subqueries this one has. One key lookup in suppressions by the address
-- key contents stored with the mail; then nothing more for mail without a
-- campaign or a schedule (nearly every transactional mail), and for the
-- rest one lookup in campaigns or schedules and the window's opening (a
-- scalar subquery the CASE reaches only for them). A suppression holds for
-- all streams (stream NULL) or for the mail's stream: still one probe of
-- suppressions_address_stream_unique by address_key, reading that
-- address's few scopes (an EXISTS, so two scopes make no second row). As a
-- A forgotten address (mailroom.forget) is suppressed for all streams: its
-- hash (mailroom._forgotten_hash, written out here to stay inlined) is
-- worked out only when some address is forgotten at all, which the claim
-- asks once (an uncorrelated EXISTS: an init plan). As a
-- lateral join of campaigns and schedules with the window in a subquery,
-- and the key put together from the address on every pick, the gate cost
-- about twice as much for transactional mail.
CREATE OR REPLACE FUNCTION mailroom._claim_gate(
  p_address_key    text,
  p_stream         text,
  p_campaign_id    bigint,
  p_schedule_id    bigint,
  p_recipient_zone text,
  p_now            timestamptz
)
RETURNS TABLE (verdict text)
LANGUAGE sql
STABLE
AS $$
  SELECT CASE
           WHEN EXISTS (SELECT FROM mailroom.suppressions s
                        WHERE s.address_key = p_address_key AND (s.stream IS NULL OR s.stream = p_stream)) THEN 'suppressed'
           WHEN EXISTS (SELECT FROM mailroom.forgotten_addresses)
                AND EXISTS (SELECT FROM mailroom.forgotten_addresses f, mailroom.erasure_pepper k
                            WHERE f.key_hash = pg_catalog.sha256(k.outer_pad OPERATOR(pg_catalog.||) pg_catalog.sha256(
                                    k.inner_pad OPERATOR(pg_catalog.||) pg_catalog.convert_to(pg_catalog.lower(p_address_key), 'UTF8'))))
             THEN 'suppressed'
           WHEN p_campaign_id IS NULL AND p_schedule_id IS NULL THEN 'claim'
           ELSE (SELECT CASE
                          WHEN k.status = 'cancelled' THEN 'campaign_cancelled'
                          WHEN k.status = 'paused' THEN 'paused'
                          WHEN NOT sc.active THEN 'schedule_inactive'
                          WHEN mailroom._window_opening(p_recipient_zone, k.time_zone, k.window_start, k.window_end,
                                                        sc.time_zone, sc.window_start, sc.window_end, p_now) > p_now
                            THEN 'window'
                          ELSE 'claim'
                        END
                 FROM (SELECT) AS one
                 LEFT JOIN mailroom.campaigns k ON k.id = p_campaign_id
                 LEFT JOIN mailroom.schedules sc ON sc.id = p_schedule_id)
         END
$$;
ALTER FUNCTION mailroom._claim_gate(text, text, bigint, bigint, text, timestamptz) OWNER TO mailroom_owner;
REVOKE ALL ON FUNCTION mailroom._claim_gate(text, text, bigint, bigint, text, timestamptz) FROM PUBLIC;
COMMENT ON FUNCTION mailroom._claim_gate(text, text, bigint, bigint, text, timestamptz) IS
  'Internal (inlined into claim_batch): claim, suppressed (for all streams or for p_stream), campaign_cancelled, paused, schedule_inactive or window for a mail to the address whose suppression key is p_address_key (contents.address_key), of that stream, campaign or schedule, at p_now.';

-- The priorities that have queued mail, highest first, each found when
-- the claim's scan needs it (a recursive CTE is read only as far as its
-- reader reads): a loose index scan over the claim index, so that a claim
-- steps from one priority to the next instead of over every mail between
-- them. It starts at the highest priority above the default (0) that has
-- queued mail, else at 0: finding the highest priority of all stepped over
-- the dead index entries the last claims left at the head of the index, a
-- heap visit each, before the claim's scan of that priority stepped over
-- them again (about 3 % of what claiming and reporting a mail costs the
-- database); a probe above 0 stops at the first entry of priority 0
-- without visiting the heap, and a priority with no due mail only leads
-- the scan on to the next. Plain SQL, inlined into the claim.
CREATE OR REPLACE FUNCTION mailroom._queued_priorities()
RETURNS TABLE (priority smallint)
LANGUAGE sql
STABLE
AS $$
  WITH RECURSIVE priorities AS (
    (SELECT coalesce((SELECT q.priority FROM mailroom.queue q WHERE q.status = 'queued' AND q.priority > 0
                      ORDER BY q.priority DESC LIMIT 1), 0::smallint) AS priority)
    UNION ALL
    SELECT (SELECT q.priority FROM mailroom.queue q
            WHERE q.status = 'queued' AND q.priority < p.priority ORDER BY q.priority DESC LIMIT 1)
    FROM priorities p WHERE p.priority IS NOT NULL
  )
  SELECT p.priority FROM priorities p WHERE p.priority IS NOT NULL
$$;
ALTER FUNCTION mailroom._queued_priorities() OWNER TO mailroom_owner;
REVOKE ALL ON FUNCTION mailroom._queued_priorities() FROM PUBLIC;
COMMENT ON FUNCTION mailroom._queued_priorities() IS
  'Internal (inlined into claim_batch): the priorities that have queued mail, highest first, found one at a time as the claim reads them (a loose index scan).';

-- How far ahead a claim re-times a mail whose paused campaign or sender it
-- could not lock: long enough that the claims meanwhile do not meet it at
-- the head of the index again and again, short enough that a resume which
-- was still committing delays its mail by no more than this.
CREATE OR REPLACE FUNCTION mailroom._claim_recheck_delay()
RETURNS interval
LANGUAGE sql IMMUTABLE
SECURITY DEFINER
SET search_path = mailroom, pg_temp
AS $$ SELECT interval '5 seconds' $$;
ALTER FUNCTION mailroom._claim_recheck_delay() OWNER TO mailroom_owner;
REVOKE ALL ON FUNCTION mailroom._claim_recheck_delay() FROM PUBLIC;
COMMENT ON FUNCTION mailroom._claim_recheck_delay() IS
  'Internal (_claim_refused): how far ahead a claim re-times a mail whose paused campaign or sender row another transaction holds (5 seconds).';

-- What the gate refused among a claim's picks, moved by the verdict it
-- gives now: cancelled (finished, with a ledger row), paused, parked for a
-- paused sender or re-timed to the window's next opening. The picks are
-- still locked by the claim; those it leased (p_token) are left alone, and
-- one whose verdict is claim by now (a suppression lifted since) stays
-- queued for the next claim. Apart from the claim's own statement so that a
-- claim whose mail all passes (nearly every one) sets up none of these moves.
CREATE OR REPLACE FUNCTION mailroom._claim_refused(p_picks bigint[], p_token uuid, p_paused_senders text[], p_now timestamptz)
RETURNS void
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = mailroom, pg_temp
-- Key lookups only, as in _claim_batch.
SET enable_seqscan = off
SET enable_bitmapscan = off
SET enable_hashjoin = off
SET enable_mergejoin = off
SET jit = off
SET plan_cache_mode = force_generic_plan
AS $$
BEGIN
  WITH gated AS (
    SELECT q.id, t.campaign_id, t.schedule_id, t.recipient_zone, q.sender,
           CASE WHEN g.verdict IN ('claim', 'window') AND q.sender = ANY (p_paused_senders) THEN 'sender_paused'
                ELSE g.verdict END AS verdict
    FROM unnest(p_picks) AS c(id)
    JOIN mailroom.queue q ON q.id = ANY (ARRAY[c.id])
    JOIN mailroom.contents t ON t.id = ANY (ARRAY[c.id])
    CROSS JOIN LATERAL mailroom._claim_gate(t.address_key, t.stream, t.campaign_id, t.schedule_id, t.recipient_zone, p_now) AS g
    WHERE q.lease_token IS DISTINCT FROM p_token
  ),
  stopped AS (
    DELETE FROM mailroom.queue q
    USING gated g
    WHERE q.id = ANY (ARRAY[g.id]) AND g.verdict IN ('suppressed', 'campaign_cancelled', 'schedule_inactive')
    RETURNING q.id, q.attempts, q.last_error, g.verdict
  ),
  stopped_ledger AS (
    INSERT INTO mailroom.attempts (message_id, attempt, finished_at, outcome, finished_as, status_reason, last_error)
    SELECT s.id, s.attempts, p_now, 'cancelled', 'cancelled', s.verdict, s.last_error
    FROM stopped s
  ),
  -- Held only if the campaign (or the sender's pause) is still there once
  -- its row is locked (FOR SHARE re-reads the newest version): a resume
  -- committing meanwhile cannot leave mail paused behind it. A row another
  -- transaction holds is skipped, never waited for (an application's open
  -- pause_campaign or resume_campaign, an operator's resume_sender): the
  -- mail stays queued, re-timed by _claim_recheck_delay, for a later claim
  -- to gate when the row is free.
  pauses AS MATERIALIZED (
    SELECT g.id, g.verdict,
           CASE WHEN g.verdict = 'paused'
                THEN EXISTS (SELECT FROM mailroom.campaigns k
                             WHERE k.id = g.campaign_id AND k.status = 'paused' FOR SHARE SKIP LOCKED)
                ELSE EXISTS (SELECT FROM mailroom.sender_pauses sp WHERE sp.sender = g.sender FOR SHARE SKIP LOCKED)
           END AS confirmed
    FROM gated g
    WHERE g.verdict IN ('paused', 'sender_paused')
  ),
  held AS (
    UPDATE mailroom.queue q
    SET status = CASE WHEN p.confirmed THEN 'paused' ELSE q.status END,
        status_reason = CASE WHEN NOT p.confirmed THEN q.status_reason
                             WHEN p.verdict = 'paused' THEN 'campaign_paused' ELSE 'sender_paused' END,
        run_at = CASE WHEN p.confirmed THEN q.run_at
                      ELSE greatest(q.run_at, p_now + mailroom._claim_recheck_delay()) END,
        updated_at = greatest(p_now, q.updated_at)
    FROM pauses p
    WHERE q.id = ANY (ARRAY[p.id])
  )
  UPDATE mailroom.queue q
  SET run_at = (SELECT mailroom._window_opening(g.recipient_zone, k.time_zone, k.window_start, k.window_end,
                                                sc.time_zone, sc.window_start, sc.window_end, p_now)
                FROM (SELECT) AS one
                LEFT JOIN mailroom.campaigns k ON k.id = g.campaign_id
                LEFT JOIN mailroom.schedules sc ON sc.id = g.schedule_id),
      updated_at = greatest(p_now, q.updated_at)
  FROM gated g
  WHERE q.id = ANY (ARRAY[g.id]) AND g.verdict = 'window';
END
$$;
ALTER FUNCTION mailroom._claim_refused(bigint[], uuid, text[], timestamptz) OWNER TO mailroom_owner;
REVOKE ALL ON FUNCTION mailroom._claim_refused(bigint[], uuid, text[], timestamptz) FROM PUBLIC;
COMMENT ON FUNCTION mailroom._claim_refused(bigint[], uuid, text[], timestamptz) IS
  'Internal (claim_batch): moves the picks of a claim that the gate refuses now (cancelled with a ledger row, paused, parked for a paused sender, re-timed to the send window''s next opening); the ones leased under p_token are left alone. A paused campaign or sender whose row another transaction holds is not waited for: its mail stays queued, re-timed by _claim_recheck_delay().';

CREATE OR REPLACE FUNCTION mailroom._claim_batch(
  p_worker text,
  p_limit  integer     DEFAULT 100,
  p_lease  interval    DEFAULT '5 minutes',
  p_sender text        DEFAULT NULL,
  p_now    timestamptz DEFAULT now()
)
RETURNS TABLE (
  id            bigint,
  lease_token   uuid,
  leased_until  timestamptz,
  delivery_key  text,
  attempt       integer,
  max_attempts  integer,
  sender        text,
  to_address    text,
  subject       text,
  body_text     text,
  body_html     text,
  headers       jsonb,
  template_key  text,
  template_vars jsonb,
  on_ambiguous  text,
  stream        text
)
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = mailroom, pg_temp
-- Every join is a key lookup for a few dozen candidates: nested loops over
-- index scans, whatever a cached generic plan guesses for LIMIT $1 (10% of
-- the table, which made v0.3 re-plan every call with force_custom_plan).
-- No bitmap scans either: the gate's probe of a pick's suppressions (one or
-- two rows) cost a bitmap's set-up on every pick.
SET enable_seqscan = off
SET enable_bitmapscan = off
SET enable_hashjoin = off
SET enable_mergejoin = off
-- ... and never JIT-compiled: a disabled plan node costs 1e10, far above jit_above_cost.
SET jit = off
-- With those plans fixed, one generic plan per statement and session: a
-- custom plan would be made again on every call (its estimate looks cheaper).
SET plan_cache_mode = force_generic_plan
AS $$
#variable_conflict use_column
DECLARE
  v_token       uuid := gen_random_uuid();
  v_limited     boolean;                 -- any sender or domain limit in play?
  v_dom_limited boolean;
  v_dom_own     boolean;                 -- any domain with a row of its own (else only the default)
  v_def_second  integer;                 -- the default domain limit ('*')
  v_def_minute  integer;
  v_round       integer := 0;
  v_want        integer;                 -- still to claim
  v_scan        integer;                 -- candidates to look at this round
  v_n           integer;
  -- limited claims: candidates (one element each, in claim order), budgets, picks
  v_cid         bigint[];
  v_crow        tid[];                   -- their rows, as the lock returned them
  v_pick_row    tid[] := '{}';
  v_cdom        text[];
  v_csnd        text[];
  v_cdlim_s     integer[];               -- each candidate's domain limits
  v_cdlim_m     integer[];
  v_cscap       integer[];               -- what its sender allows now
  v_csok        boolean[];               -- its sender lets it go (NULL: no sender limited)
  v_csrow_s     tid[];                   -- the sender's budget rows locked for it
  v_csrow_m     tid[];
  v_gdom        text[];                  -- limited domains and what each granted
  v_gn          integer[];
  v_granted     integer;                 -- their sum
  v_climited    integer;                 -- candidates whose domain is limited
  v_pick        bigint[] := '{}';
  v_claimed     bigint[];
  v_snd_names   text[] := '{}';          -- limited senders, their limits, budgets and rows
  v_snd_lim_s   integer[] := '{}';
  v_snd_lim_m   integer[] := '{}';
  v_snd_caps    integer[] := '{}';
  v_snd_row_s   tid[] := '{}';
  v_snd_row_m   tid[] := '{}';
  v_snd_blocked text[] := '{}';
  v_dom_blocked text[] := '{}';
  v_paused_senders text[];               -- senders the circuit breaker paused (issue 16)
  v_backlog     boolean;                 -- an active campaign's backlog is due (top it up)
  v_throttled   boolean;                 -- a destination group's learned rate is in effect
  v_warm_names  text[];                  -- senders warming up (in name order), what is left of
  v_warm_left   integer[];               -- their day's budget, and what broadcast mail may use
  v_warm_bulk   integer[];
  v_today       date := (p_now AT TIME ZONE 'UTC')::date;
  v_cbulk       boolean[];               -- candidate is broadcast mail (warm-up only)
  v_held        bigint[] := '{}';        -- broadcast candidates the warm-up's reserve holds back
  v_bulk_held   text[] := '{}';          -- senders whose broadcast mail the reserve holds back
BEGIN
  IF current_setting('transaction_isolation') <> 'read committed' THEN
    RAISE EXCEPTION 'mailroom: transaction_isolation: claim_batch runs only under READ COMMITTED, not %',
      current_setting('transaction_isolation') USING ERRCODE = '0A000';
  END IF;
  IF p_worker IS NULL OR p_worker = '' OR length(p_worker) > 200 THEN
    RAISE EXCEPTION 'mailroom: worker: must be 1 to 200 characters' USING ERRCODE = '22023';
  END IF;
  IF p_limit IS NULL OR p_limit NOT BETWEEN 1 AND 10000 THEN
    PERFORM mailroom._check_range('limit', p_limit, 1, 10000);
  END IF;
  IF p_lease IS NULL OR p_lease <= interval '0' OR p_lease > interval '1 day' THEN
    PERFORM mailroom._check_lease(p_lease);
  END IF;

  -- Which budgets can matter for this claim, which senders are paused and
  -- whether a campaign may need its next chunk queued: one look at the
  -- small settings tables (one statement, not one each). Without any budget
  -- the claim locks nothing but its rows, and claims never wait for each
  -- other; paused senders are usually none, so the gate costs nothing per
  -- candidate for them; without a running campaign the top-up is not called.
  SELECT dflt.max_per_second, dflt.max_per_minute,
         dflt.max_per_second IS NOT NULL OR dflt.max_per_minute IS NOT NULL
           OR EXISTS (SELECT FROM mailroom.domain_limits d
                      WHERE d.domain <> '*' AND (d.max_per_second IS NOT NULL OR d.max_per_minute IS NOT NULL)),
         -- A domain's own row, even one without limits (exempt from the default), wins over '*'.
         EXISTS (SELECT FROM mailroom.domain_limits d WHERE d.domain <> '*'),
         snd.names, snd.lim_s, snd.lim_m,
         ARRAY(SELECT sp.sender FROM mailroom.sender_pauses sp),
         -- (What _campaign_top_up walks, read once here.)
         EXISTS (SELECT FROM mailroom.campaign_backlog b JOIN mailroom.campaigns k ON k.id = b.campaign_id
                 WHERE k.status = 'active' AND b.not_before <= p_now),
         EXISTS (SELECT FROM mailroom.destination_throttles th WHERE th.in_effect),
         -- Senders whose warm-up is not over (a day of the ramp today).
         ARRAY(SELECT w.sender FROM mailroom.sender_warmups w
               WHERE (p_sender IS NULL OR w.sender = p_sender) AND w.started_on <= v_today
                 AND cardinality(w.ramp) > v_today - w.started_on
               ORDER BY w.sender)
    INTO v_def_second, v_def_minute, v_dom_limited, v_dom_own, v_snd_names, v_snd_lim_s, v_snd_lim_m,
         v_paused_senders, v_backlog, v_throttled, v_warm_names
  FROM (SELECT) AS one
  LEFT JOIN mailroom.domain_limits dflt ON dflt.domain = '*'
  CROSS JOIN LATERAL (
    SELECT coalesce(array_agg(s.name ORDER BY s.name), '{}') AS names,
           coalesce(array_agg(s.max_per_second ORDER BY s.name), '{}') AS lim_s,
           coalesce(array_agg(s.max_per_minute ORDER BY s.name), '{}') AS lim_m
    FROM mailroom.senders s
    WHERE (p_sender IS NULL OR s.name = p_sender) AND (s.max_per_second IS NOT NULL OR s.max_per_minute IS NOT NULL)
  ) AS snd;
  v_dom_limited := v_dom_limited OR v_throttled;
  v_limited := v_dom_limited OR cardinality(v_snd_names) > 0 OR cardinality(v_warm_names) > 0;

  -- Campaign mail is queued a chunk at a time (deploy/campaign_chunks.sql):
  -- queue the next chunk of a campaign running low before picking, so the
  -- pick sees it. (A backlog that appears after the look above is the next
  -- claim's to top up.)
  IF v_backlog THEN
    PERFORM mailroom._campaign_top_up(p_now);
  END IF;

  v_want := p_limit;
  WHILE v_want > 0 AND v_round < 3 LOOP
    v_round := v_round + 1;
    v_scan := v_want;

    IF v_limited THEN
      -- Under send budgets the candidates are chosen first (v_pick, locked,
      -- steps 1 to 4), then gated and leased by the statement below (and
      -- steps 5 to 7 settle the budgets).
      -- 1. Senders: lock their budget rows (sender keys always before domain
      --    keys, each set in key order) and see what each allows now.
      IF cardinality(v_snd_names) > 0 THEN
        SELECT coalesce(array_agg(b.available ORDER BY b.ord), '{}'), coalesce(array_agg(b.second_row ORDER BY b.ord), '{}'),
               coalesce(array_agg(b.minute_row ORDER BY b.ord), '{}')
          INTO v_snd_caps, v_snd_row_s, v_snd_row_m
        FROM mailroom._send_budgets('mailroom/sender/', v_snd_names, v_snd_lim_s, v_snd_lim_m, p_now) AS b;
        SELECT v_snd_blocked || coalesce(array_agg(u.name), '{}') INTO v_snd_blocked
        FROM unnest(v_snd_names, v_snd_caps) AS u(name, cap) WHERE u.cap = 0 AND u.name <> ALL (v_snd_blocked);
        IF p_sender IS NOT NULL THEN
          v_want := least(v_want, coalesce(v_snd_caps[1], v_want));
          EXIT WHEN v_want = 0;  -- at its limit: nothing to scan
        END IF;
      END IF;
      -- 1b. Warm-up: lock the warming senders' rows (after the senders'
      --     budgets, in name order) and see what is left of each one's day.
      --     A sender with nothing left is not scanned.
      IF cardinality(v_warm_names) > 0 THEN
        SELECT coalesce(array_agg(w.sender ORDER BY w.sender), '{}'), coalesce(array_agg(w.left_today ORDER BY w.sender), '{}'),
               coalesce(array_agg(w.bulk_today ORDER BY w.sender), '{}')
          INTO v_warm_names, v_warm_left, v_warm_bulk
        FROM (SELECT w.sender, greatest(0, d.budget - d.used) AS left_today,
                     greatest(0, d.budget - d.used
                                 - ceil(d.budget * mailroom._setting('warmup_transactional_reserve')::numeric)::integer) AS bulk_today
              FROM (SELECT w.* FROM mailroom.sender_warmups w WHERE w.sender = ANY (v_warm_names)
                    ORDER BY w.sender FOR UPDATE) AS w
              CROSS JOIN LATERAL mailroom._warmup_day(w.started_on, w.ramp, w.used_on, w.used, v_today) AS d
              WHERE d.budget IS NOT NULL) AS w;
        SELECT v_snd_blocked || coalesce(array_agg(u.name), '{}') INTO v_snd_blocked
        FROM unnest(v_warm_names, v_warm_left) AS u(name, left_today) WHERE u.left_today = 0 AND u.name <> ALL (v_snd_blocked);
        IF p_sender IS NOT NULL THEN
          v_want := least(v_want, coalesce(v_warm_left[1], v_want));
          EXIT WHEN v_want = 0;  -- its day's budget is spent
        END IF;
      END IF;
      -- Each candidate's domain costs a budget lookup: look at as many as
      -- are wanted; a round that budgets held back is followed by another
      -- that leaves those domains out.
      v_scan := v_want;

      -- 2. The candidates, locked, in claim order, with their rows as the
      --    lock returned them (the lease finds them by ctid, as the
      --    unlimited claim does), their domains, the domains' limits (their
      --    own row, else the default) and what their senders allow. One sort
      --    feeds every array (an ORDER BY in each aggregate sorted the
      --    candidates once per array).
      SELECT coalesce(array_agg(c.id), '{}'), coalesce(array_agg(c.row), '{}'),
             coalesce(array_agg(c.to_domain), '{}'), coalesce(array_agg(c.sender), '{}'),
             coalesce(array_agg(c.lim_s), '{}'), coalesce(array_agg(c.lim_m), '{}'),
             coalesce(array_agg(v_snd_caps[c.si]), '{}'),
             coalesce(array_agg(v_snd_row_s[c.si]), '{}'), coalesce(array_agg(v_snd_row_m[c.si]), '{}'),
             count(*) FILTER (WHERE c.lim_s IS NOT NULL OR c.lim_m IS NOT NULL),
             coalesce(array_agg(c.bulk), '{}')
        INTO v_cid, v_crow, v_cdom, v_csnd, v_cdlim_s, v_cdlim_m, v_cscap, v_csrow_s, v_csrow_m, v_climited, v_cbulk
      FROM (
        -- A throttled group's domains share its budget key, at the lower
        -- of the learned rate and the domain's own limits (least skips NULL).
        SELECT c.id, c.row, c.sender, c.si, coalesce(th.budget_key, t.to_domain) AS to_domain,
               least(CASE WHEN e.domain IS NULL THEN v_def_second ELSE e.max_per_second END, th.per_second) AS lim_s,
               least(CASE WHEN e.domain IS NULL THEN v_def_minute ELSE e.max_per_minute END, th.per_minute) AS lim_m,
               CASE WHEN cardinality(v_warm_names) > 0
                    THEN coalesce((SELECT st.unsubscribe_headers FROM mailroom.streams st WHERE st.name = t.stream), false) END AS bulk
        FROM (
          SELECT due.*, array_position(v_snd_names, due.sender) AS si FROM mailroom._queued_priorities() AS p
          CROSS JOIN LATERAL (
            SELECT q.id, q.ctid AS row, q.priority, q.run_at, q.sender FROM mailroom.queue q
            WHERE q.status = 'queued' AND q.priority = p.priority AND q.run_at <= p_now
              AND (p_sender IS NULL OR q.sender = p_sender)
              AND q.sender <> ALL (v_snd_blocked)
              -- (Held broadcast mail is passed over for its sender's
              -- transactional mail: a contents lookup per mail scanned.)
              AND (cardinality(v_bulk_held) = 0 OR q.sender <> ALL (v_bulk_held)
                   OR NOT (SELECT st.unsubscribe_headers FROM mailroom.contents b JOIN mailroom.streams st ON st.name = b.stream
                           WHERE b.id = q.id))
              AND (cardinality(v_dom_blocked) = 0
                   OR (SELECT CASE WHEN v_throttled
                                   THEN coalesce((SELECT th.budget_key FROM mailroom._throttle_for(b.to_domain) AS th), b.to_domain)
                                   ELSE b.to_domain END
                       FROM mailroom.contents b WHERE b.id = q.id) <> ALL (v_dom_blocked))
            ORDER BY q.run_at, q.id
            LIMIT v_scan
            FOR UPDATE SKIP LOCKED
          ) AS due
          LIMIT v_scan
        ) AS c
        JOIN mailroom.contents t ON t.id = ANY (ARRAY[c.id])
        -- (Only the default: no lookup per candidate.)
        LEFT JOIN mailroom.domain_limits e ON v_dom_own AND e.domain = t.to_domain
        -- (Nothing throttled: no lookup per candidate either.)
        LEFT JOIN LATERAL mailroom._throttle_for(t.to_domain) AS th ON v_throttled
        ORDER BY c.priority DESC, c.run_at, c.id
      ) AS c;
      EXIT WHEN cardinality(v_cid) = 0;

      -- 3. Senders' caps per candidate, in claim order (only when a sender
      --    is limited or warms up). Warm-up: a sender's transactional mail
      --    first, up to what is left of its day; its broadcast mail in what
      --    the transactional candidates leave of that, and no more than it
      --    leaves above the reserve. Broadcast mail that only the warm-up
      --    holds back is held (re-timed below), not a reason to leave its
      --    sender out of the next round.
      IF cardinality(v_snd_names) > 0 AND cardinality(v_warm_names) = 0 THEN
        SELECT array_agg(c.ok ORDER BY c.ord) INTO v_csok
        FROM (SELECT u.ord, row_number() OVER (PARTITION BY u.sender ORDER BY u.ord) <= coalesce(u.scap, 2147483647) AS ok
              FROM unnest(v_csnd, v_cscap) WITH ORDINALITY AS u(sender, scap, ord)) AS c;
      ELSIF cardinality(v_warm_names) > 0 THEN
        SELECT array_agg(c.rate_ok AND c.warm_ok ORDER BY c.ord),
               coalesce(array_agg(c.id) FILTER (WHERE c.rate_ok AND NOT c.warm_ok AND c.bulk AND c.wleft > 0), '{}')
          INTO v_csok, v_held
        FROM (SELECT u.ord, u.id, u.bulk, w.wleft,
                     row_number() OVER (PARTITION BY u.sender ORDER BY u.ord) <= coalesce(u.scap, 2147483647) AS rate_ok,
                     w.wleft IS NULL
                       OR CASE WHEN NOT u.bulk THEN row_number() OVER (PARTITION BY u.sender, u.bulk ORDER BY u.ord) <= w.wleft
                               ELSE row_number() OVER (PARTITION BY u.sender, u.bulk ORDER BY u.ord)
                                      <= least(w.wbulk, w.wleft - least(w.wleft, count(*) FILTER (WHERE NOT u.bulk)
                                                                                   OVER (PARTITION BY u.sender)))
                          END AS warm_ok
              FROM unnest(v_cid, v_csnd, v_cscap, v_cbulk) WITH ORDINALITY AS u(id, sender, scap, bulk, ord)
              LEFT JOIN LATERAL (SELECT v_warm_left[array_position(v_warm_names, u.sender)] AS wleft,
                                        v_warm_bulk[array_position(v_warm_names, u.sender)] AS wbulk) AS w ON true) AS c;
        SELECT v_bulk_held || coalesce(array_agg(DISTINCT u.sender), '{}') INTO v_bulk_held
        FROM unnest(v_cid, v_csnd) AS u(id, sender) WHERE u.id = ANY (v_held) AND u.sender <> ALL (v_bulk_held);
      END IF;

      -- 4. Domains: the budgets of the limited domains of the candidates
      --    their senders let go, locked, judged and spent in one statement.
      --    Then the pick: in claim order, each domain no more than it
      --    granted. Domains and senders that held mail back are left out
      --    of the next round's scan. (No more picks than wanted: the scan
      --    took no more candidates.)
      IF v_dom_limited THEN
        SELECT coalesce(array_agg(b.domain), '{}'), coalesce(array_agg(b.granted), '{}'), coalesce(sum(b.granted), 0)
          INTO v_gdom, v_gn, v_granted
        FROM mailroom._domain_budgets_spend(
               CASE WHEN v_csok IS NULL THEN v_cdom
                    ELSE ARRAY(SELECT CASE WHEN v_csok[u.ord] THEN u.domain END
                               FROM unnest(v_cdom) WITH ORDINALITY AS u(domain, ord) ORDER BY u.ord) END,
               v_cdlim_s, v_cdlim_m, p_now) AS b;
      END IF;
      IF v_csok IS NULL AND v_granted = v_climited THEN
        -- Every domain granted all its candidates asked for (a grant is
        -- never more than asked) and no sender is limited: all are picked,
        -- without working out the pick candidate by candidate. (With no
        -- sender limited a domain is; v_granted is NULL otherwise.)
        v_pick := v_cid;
        v_pick_row := v_crow;
      ELSE
        SELECT coalesce(array_agg(p.id ORDER BY p.ord) FILTER (WHERE p.snd_ok AND p.dom_ok), '{}'),
               coalesce(array_agg(p.row ORDER BY p.ord) FILTER (WHERE p.snd_ok AND p.dom_ok), '{}'),
               v_dom_blocked || coalesce(array_agg(DISTINCT p.domain) FILTER (WHERE p.snd_ok AND NOT p.dom_ok), '{}'),
               v_snd_blocked || coalesce(array_agg(DISTINCT p.sender) FILTER (WHERE NOT p.snd_ok AND NOT p.held), '{}')
          INTO v_pick, v_pick_row, v_dom_blocked, v_snd_blocked
        FROM (
          SELECT c.id, c.row, c.ord, c.domain, c.sender, c.snd_ok, c.id = ANY (v_held) AS held,
                 c.granted IS NULL
                   OR row_number() OVER (PARTITION BY c.domain, c.snd_ok ORDER BY c.ord) <= c.granted AS dom_ok
          FROM (
            SELECT u.id, u.row, u.ord, u.domain, u.sender, coalesce(v_csok[u.ord], true) AS snd_ok,
                   v_gn[array_position(v_gdom, u.domain)] AS granted
            FROM unnest(v_cid, v_crow, v_cdom, v_csnd) WITH ORDINALITY AS u(id, row, domain, sender, ord)
          ) AS c
        ) AS p;
      END IF;
    END IF;

    -- The picks, the gate and the lease, one statement. Without a budget in
    -- play (nearly every claim) the picks are the candidates themselves,
    -- locked here: highest priority first (_queued_priorities: a loose
    -- index scan, so a large batch of high-priority mail scheduled for
    -- later is not scanned on every claim), then oldest due. Under budgets
    -- they are v_pick, locked above. Each pick's verdict from its content
    -- row; the ones the gate lets go are leased, found by the ctid their
    -- lock returned (the lock holds that row version until commit: no key
    -- lookup), and returned with their content in the order they were
    -- picked: the picks drive every join, so no sort is needed.
    -- (MATERIALIZED: each verdict worked out once; folded into the UPDATE
    -- the planner evaluated the gate's suppression probe twice per pick. It
    -- holds the content row's ctid, not the content: the UPDATE copies
    -- every row of a subquery it joins, for a concurrent update's recheck,
    -- and a mail's bodies would be copied once more; contents rows are never
    -- updated, so the ctid holds.) One statement instead of a locking
    -- statement whose picks the next one read from an array and looked up
    -- by key: about 5 % of what claiming and reporting a mail costs the
    -- database. (The picks are locked by this transaction, so no condition
    -- names a status: one the planner could match to a partial index might
    -- lead a cached plan to walk that index instead of looking up each pick.)
    RETURN QUERY
    WITH picks AS (
      (SELECT due.id, due.row FROM mailroom._queued_priorities() AS p
       CROSS JOIN LATERAL (
         SELECT q.id, q.ctid AS row FROM mailroom.queue q
         WHERE q.status = 'queued' AND q.priority = p.priority AND q.run_at <= p_now
           AND (p_sender IS NULL OR q.sender = p_sender)
         ORDER BY q.run_at, q.id
         LIMIT v_scan
         FOR UPDATE SKIP LOCKED
       ) AS due
       WHERE NOT v_limited
       LIMIT v_scan)
      UNION ALL
      SELECT u.id, u.row FROM unnest(v_pick, v_pick_row) AS u(id, row)
      WHERE v_limited
    ),
    gated AS MATERIALIZED (
      SELECT c.row, t.ctid AS content_row, g.verdict
      FROM picks c
      JOIN mailroom.contents t ON t.id = ANY (ARRAY[c.id])
      CROSS JOIN LATERAL mailroom._claim_gate(t.address_key, t.stream, t.campaign_id, t.schedule_id, t.recipient_zone, p_now) AS g
    )
    UPDATE mailroom.queue q
    SET status       = 'sending',
        attempts     = q.attempts + 1,
        lease_token  = v_token,
        leased_until = p_now + p_lease,
        worker       = p_worker,
        claimed_at   = greatest(p_now, q.updated_at),
        updated_at   = greatest(p_now, q.updated_at)
    FROM gated g
    JOIN mailroom.contents t ON t.ctid = g.content_row
    WHERE q.ctid = g.row AND g.verdict = 'claim'
      AND (cardinality(v_paused_senders) = 0 OR q.sender <> ALL (v_paused_senders))
    RETURNING q.id, q.lease_token, q.leased_until, t.delivery_key, q.attempts, q.max_attempts, q.sender,
              t.to_address, t.subject, t.body_text, t.body_html, t.headers, t.template_key, t.template_vars,
              q.on_ambiguous, t.stream;
    GET DIAGNOSTICS v_n = ROW_COUNT;
    v_want := v_want - v_n;

    IF NOT v_limited THEN
      EXIT WHEN v_n = v_scan;
      -- Fewer than asked: the due mail ran out, or the gate refused picks
      -- (rare). Those are still locked by this claim, so the same scan finds
      -- them again (a transaction does not skip its own locks), with what
      -- else is due and free now; what the gate refuses is moved by its
      -- verdict, and another round claims the rest. (When nothing was
      -- refused this scan finds nothing: the picks are leased.)
      SELECT coalesce(array_agg(due.id), '{}') INTO v_pick
      FROM (
        SELECT due.id FROM mailroom._queued_priorities() AS p
        CROSS JOIN LATERAL (
          SELECT q.id FROM mailroom.queue q
          WHERE q.status = 'queued' AND q.priority = p.priority AND q.run_at <= p_now
            AND (p_sender IS NULL OR q.sender = p_sender)
          ORDER BY q.run_at, q.id
          LIMIT v_scan
          FOR UPDATE SKIP LOCKED
        ) AS due
        LIMIT v_scan
      ) AS due;
      EXIT WHEN cardinality(v_pick) = 0;
      PERFORM mailroom._claim_refused(v_pick, v_token, v_paused_senders, p_now);
      CONTINUE;
    END IF;

    -- 5. What the gate refused (rare): moved, by its verdict now.
    IF v_n < cardinality(v_pick) THEN
      PERFORM mailroom._claim_refused(v_pick, v_token, v_paused_senders, p_now);
    END IF;

    -- 6. A pick the gate refused gives its domain's grant back (the
    --    row is still locked by this claim), and only what was claimed
    --    counts below.
    IF v_n < cardinality(v_pick) THEN
      SELECT coalesce(array_agg(q.id), '{}') INTO v_claimed
      FROM mailroom.queue q WHERE q.id = ANY (v_pick) AND q.lease_token = v_token;
      IF v_dom_limited THEN
        PERFORM FROM (
          SELECT array_agg(u.domain ORDER BY u.ord) AS domains, array_agg(u.lim_s ORDER BY u.ord) AS lim_s,
                 array_agg(u.lim_m ORDER BY u.ord) AS lim_m
          FROM unnest(v_cid, v_cdom, v_cdlim_s, v_cdlim_m) WITH ORDINALITY AS u(id, domain, lim_s, lim_m, ord)
          WHERE u.id = ANY (v_pick) AND u.id <> ALL (v_claimed)
        ) AS refused
        CROSS JOIN LATERAL mailroom._domain_budgets_spend(refused.domains, refused.lim_s, refused.lim_m, p_now, -1);
      END IF;
      v_pick := v_claimed;
    END IF;
    -- 7. Spend the senders' budgets on what was claimed, before the locks
    --    go at commit: one update of the rows _send_budgets locked, found
    --    by the ctid it handed back (no key lookups).
    IF v_n > 0 AND cardinality(v_snd_names) > 0 THEN
      UPDATE mailroom.rate_limits AS r
      SET (slots, slot_hits, hits) = (
            SELECT a.slots, a.slot_hits, a.used
            FROM mailroom._rate_slots_add(
                   CASE WHEN r.algorithm = 'sliding' AND r.window_length = u.win THEN r.slots END,
                   CASE WHEN r.algorithm = 'sliding' AND r.window_length = u.win THEN r.slot_hits END,
                   u.slot, u.n) AS a),
          algorithm = 'sliding',
          window_length = u.win,
          window_start = NULL,
          expires_at = greatest(CASE WHEN r.algorithm = 'sliding' AND r.window_length = u.win THEN r.expires_at END,
                                mailroom._from_epoch_us((u.slot + 51) * u.res))
      FROM (SELECT k.row_id, k.win, count(*)::integer AS n,
                   mailroom._rate_slot(p_now, k.win) AS slot,
                   CASE k.win WHEN interval '1 second' THEN 20000::bigint ELSE 1200000::bigint END AS res
            FROM unnest(v_cid, v_csrow_s, v_csrow_m) AS c(id, ss, sm)
            CROSS JOIN LATERAL (VALUES (c.ss, interval '1 second'), (c.sm, interval '1 minute')) AS k(row_id, win)
            WHERE c.id = ANY (v_pick) AND k.row_id IS NOT NULL
            GROUP BY k.row_id, k.win) AS u
      WHERE r.ctid = u.row_id;
    END IF;
    -- 7b. Count what was claimed against the warming senders' day, and
    --     move the broadcast mail the reserve held back out of the way.
    IF cardinality(v_warm_names) > 0 THEN
      IF v_n > 0 THEN
        UPDATE mailroom.sender_warmups AS w
        SET used = CASE WHEN w.used_on = v_today THEN w.used ELSE 0 END + u.n,
            used_on = v_today
        FROM (SELECT c.sender, count(*)::integer AS n
              FROM unnest(v_cid, v_csnd) AS c(id, sender)
              WHERE c.id = ANY (v_pick) AND c.sender = ANY (v_warm_names)
              GROUP BY c.sender) AS u
        WHERE w.sender = u.sender;
      END IF;
      IF cardinality(v_held) > 0 THEN
        UPDATE mailroom.queue q
        SET run_at = greatest(q.run_at, p_now + mailroom._setting('warmup_hold')::interval),
            updated_at = greatest(p_now, q.updated_at)
        WHERE q.id = ANY (v_held) AND q.status = 'queued';
        v_held := '{}';
      END IF;
    END IF;
    -- Another round only if a budget held candidates back (the others
    -- were claimed or moved by the gate) or the scan was cut short.
    EXIT WHEN cardinality(v_dom_blocked) = 0 AND cardinality(v_snd_blocked) = 0 AND cardinality(v_cid) < v_scan;
  END LOOP;
END
$$;
ALTER FUNCTION mailroom._claim_batch(text, integer, interval, text, timestamptz) OWNER TO mailroom_owner;
REVOKE ALL ON FUNCTION mailroom._claim_batch(text, integer, interval, text, timestamptz) FROM PUBLIC;
COMMENT ON FUNCTION mailroom._claim_batch(text, integer, interval, text, timestamptz) IS
  'Owner-only twin of claim_batch with a pinned clock (tests).';

CREATE OR REPLACE FUNCTION mailroom.claim_batch(
  p_worker text,
  p_limit  integer  DEFAULT 100,
  p_lease  interval DEFAULT '5 minutes',
  p_sender text     DEFAULT NULL
)
RETURNS TABLE (
  id            bigint,
  lease_token   uuid,
  leased_until  timestamptz,
  delivery_key  text,
  attempt       integer,
  max_attempts  integer,
  sender        text,
  to_address    text,
  subject       text,
  body_text     text,
  body_html     text,
  headers       jsonb,
  template_key  text,
  template_vars jsonb,
  on_ambiguous  text,
  stream        text
)
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = mailroom, pg_temp
AS $$
BEGIN
  -- plpgsql, not SQL: the call's plan is kept for the session (a SQL
  -- function's body is planned again on every call).
  RETURN QUERY SELECT * FROM mailroom._claim_batch(p_worker, p_limit, p_lease, p_sender, now());
END
$$;
ALTER FUNCTION mailroom.claim_batch(text, integer, interval, text) OWNER TO mailroom_owner;
REVOKE ALL ON FUNCTION mailroom.claim_batch(text, integer, interval, text) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION mailroom.claim_batch(text, integer, interval, text) TO mailroom_runner;
COMMENT ON FUNCTION mailroom.claim_batch(text, integer, interval, text) IS
  'Lease up to p_limit due mail (highest priority, then oldest run_at) to p_worker for p_lease under one fresh lease token; NULL p_sender takes any sender. Returns each mail''s stream last. The one gate: mail to an address suppressed for all streams or for its stream, mail of a cancelled campaign or an inactive schedule is finished cancelled, mail of a paused campaign or of a sender the circuit breaker paused is held, mail outside its send window is moved to its next opening, and none of it is returned. Grants no more than the send rates allow right now (mailroom.senders per sender, mailroom.domain_limits per recipient domain, summed over all runners). Each claim counts an attempt; its ledger row is written when the lease ends. READ COMMITTED only.';

COMMIT;
