-- Revert mailroom:claim_batch from pg: back to the v0.3.0 functions (with p_now), on mailroom.messages,
-- which split_messages' revert (next) restores as a table.

-- A claim no longer opens a ledger row: the lease it grants is on the message
-- (lease_token, worker, claimed_at, attempts) and the attempt's row is written
-- once, when the lease ends (mark_outcomes, reclaim, release). Inserting the
-- row here and updating it there wrote every attempt twice.
--
-- Kept from v0.2.0: a claim is stamped no earlier than the row's last change,
-- so the ledger never shows two overlapping leases of one message.

BEGIN;

DROP FUNCTION mailroom.claim_batch(text, integer, interval, text);
DROP FUNCTION mailroom._claim_batch(text, integer, interval, text, timestamptz);
DROP FUNCTION mailroom._claim_gate(text, text, bigint, bigint, text, timestamptz);
DROP FUNCTION mailroom._window_opening(text, text, time, time, text, time, time, timestamptz);
DROP FUNCTION mailroom._queued_priorities();
DROP FUNCTION mailroom._claim_refused(bigint[], uuid, text[], timestamptz);

CREATE OR REPLACE FUNCTION mailroom.claim_batch(
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
  on_ambiguous  text
)
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = mailroom, pg_temp
-- Plan with the real limit every time: a generic plan guesses LIMIT $1 at 10%
-- of the table and can pick a hash join over all of it.
SET plan_cache_mode = force_custom_plan
AS $$
#variable_conflict use_column
DECLARE
  v_token       uuid := gen_random_uuid();
  v_budget      integer := p_limit;      -- what the sender limit allows this claim
  v_scan        integer;                 -- candidates to look at
  v_snd_names   text[] := '{}';          -- limited senders in play, and what each allows now
  v_snd_caps    integer[] := '{}';
  v_snd_blocked text[] := '{}';          -- ... those at their limit
  v_dom_limited boolean;                 -- any domain limit configured?
  v_dom_default integer;                 -- what the default allows a domain with no sends yet (NULL: no limit)
  v_dom_names   text[] := '{}';          -- domains with a row or recent sends, and what each allows now
  v_dom_caps    integer[] := '{}';
  v_dom_blocked text[] := '{}';          -- ... those at their limit
  v_def_second  integer;
  v_def_minute  integer;
  v_slot_second bigint;
  v_slot_minute bigint;
  v_keys        text[];                  -- the budgets this claim spent
  v_counts      integer[];
  v_windows     interval[];
  v_row         record;
  v_available   integer;
BEGIN
  IF p_worker IS NULL OR p_worker = '' OR length(p_worker) > 200 THEN
    RAISE EXCEPTION 'mailroom: worker: must be 1 to 200 characters' USING ERRCODE = '22023';
  END IF;
  PERFORM mailroom._check_range('limit', p_limit, 1, 10000);
  PERFORM mailroom._check_lease(p_lease);

  -- Send rates (docs/cache-and-rate-limits.md). Without any configured limit
  -- none of this locks anything, and claims never wait for each other.
  --
  -- 1. Senders: lock each limited sender's budget rows (in name order, so
  --    claims cannot deadlock) and see what it allows now. Claims for one
  --    limited sender therefore take turns; each is a few milliseconds.
  FOR v_row IN
    SELECT s.name, s.max_per_second, s.max_per_minute
    FROM mailroom.senders s
    WHERE (p_sender IS NULL OR s.name = p_sender)
      AND (s.max_per_second IS NOT NULL OR s.max_per_minute IS NOT NULL)
    ORDER BY s.name
  LOOP
    v_available := coalesce(mailroom._send_rate_available(
      'mailroom/sender/' || v_row.name, v_row.max_per_second, v_row.max_per_minute, p_now), 2147483647);
    v_snd_names := v_snd_names || v_row.name;
    v_snd_caps := v_snd_caps || v_available;
    IF v_available = 0 THEN
      v_snd_blocked := v_snd_blocked || v_row.name;
    END IF;
  END LOOP;
  IF p_sender IS NOT NULL AND cardinality(v_snd_caps) = 1 THEN
    v_budget := least(v_budget, v_snd_caps[1]);
    IF v_budget = 0 THEN
      RETURN;  -- at its limit: nothing to scan
    END IF;
  END IF;

  -- 2. Domains: one claim at a time counts domain sends (a transaction-level
  --    advisory lock, so also the first send to a new domain is counted
  --    exactly); what each domain allows now comes from one statement over
--    the domains with a row of their own or recent sends.
  SELECT d.max_per_second, d.max_per_minute INTO v_def_second, v_def_minute
  FROM mailroom.domain_limits d WHERE d.domain = '*';
  v_dom_limited := v_def_second IS NOT NULL OR v_def_minute IS NOT NULL
    OR EXISTS (SELECT FROM mailroom.domain_limits d
               WHERE d.domain <> '*' AND (d.max_per_second IS NOT NULL OR d.max_per_minute IS NOT NULL));
  IF v_dom_limited THEN
    PERFORM pg_advisory_xact_lock(1835100525, 1);  -- 'mail' + 1: send-rate lock space
    v_dom_default := least(v_def_second, v_def_minute);
    v_slot_second := mailroom._rate_slot(p_now, interval '1 second');
    v_slot_minute := mailroom._rate_slot(p_now, interval '1 minute');
    SELECT coalesce(array_agg(k.domain), '{}'),
           coalesce(array_agg(coalesce(k.cap, 2147483647)), '{}'),
           coalesce(array_agg(k.domain) FILTER (WHERE k.cap = 0), '{}')
      INTO v_dom_names, v_dom_caps, v_dom_blocked
    FROM (
      SELECT dom.domain,
             least(CASE WHEN lim.per_second IS NULL THEN NULL
                        WHEN us.newest - 50 > v_slot_second THEN 0  -- p_now too far behind to judge
                        ELSE greatest(lim.per_second - us.used, 0) END,
                   CASE WHEN lim.per_minute IS NULL THEN NULL
                        WHEN um.newest - 50 > v_slot_minute THEN 0
                        ELSE greatest(lim.per_minute - um.used, 0) END) AS cap
      FROM (SELECT d.domain FROM mailroom.domain_limits d WHERE d.domain <> '*'
            UNION
            SELECT left(substr(r.key, 17), -2) FROM mailroom.rate_limits r
            WHERE starts_with(r.key, 'mailroom/domain/')) AS dom
      LEFT JOIN mailroom.domain_limits e ON e.domain = dom.domain
      CROSS JOIN LATERAL (SELECT CASE WHEN e.domain IS NULL THEN v_def_second ELSE e.max_per_second END AS per_second,
                                 CASE WHEN e.domain IS NULL THEN v_def_minute ELSE e.max_per_minute END AS per_minute) AS lim
      LEFT JOIN mailroom.rate_limits rs ON rs.key = 'mailroom/domain/' || dom.domain || '/s'
                                       AND rs.algorithm = 'sliding' AND rs.window_length = interval '1 second'
      LEFT JOIN mailroom.rate_limits rm ON rm.key = 'mailroom/domain/' || dom.domain || '/m'
                                       AND rm.algorithm = 'sliding' AND rm.window_length = interval '1 minute'
      CROSS JOIN LATERAL mailroom._rate_slots_used(rs.slots, rs.slot_hits, v_slot_second) AS us
      CROSS JOIN LATERAL mailroom._rate_slots_used(rm.slots, rm.slot_hits, v_slot_minute) AS um
    ) AS k;
  END IF;

  -- Under per-sender or per-domain caps some candidates are passed over:
  -- look at more of them so the batch still fills.
  v_scan := CASE WHEN v_dom_limited OR (p_sender IS NULL AND cardinality(v_snd_names) > 0)
                 THEN least(v_budget * 2, 10000) ELSE v_budget END;

  -- 3. The claim: one statement. Priorities are walked from the highest down
  -- (a loose index scan over the claim index); within each, due mail is taken
  -- oldest first and locked with SKIP LOCKED, leaving out senders and domains
  -- at their limit. Walking per priority keeps a large batch of high-priority
  -- mail scheduled for later from being scanned on every claim. Of the
  -- candidates, each domain and sender gets no more than it allows now.
  RETURN QUERY
  WITH RECURSIVE priorities AS (
    (SELECT m.priority FROM mailroom.messages m
     WHERE m.status = 'queued'
     ORDER BY m.priority DESC LIMIT 1)
    UNION ALL
    SELECT (SELECT m.priority FROM mailroom.messages m
            WHERE m.status = 'queued' AND m.priority < p.priority
            ORDER BY m.priority DESC LIMIT 1)
    FROM priorities p
    WHERE p.priority IS NOT NULL
  ),
  candidates AS (
    SELECT due.id, due.priority, due.run_at, due.sender, due.to_domain
    FROM priorities p
    CROSS JOIN LATERAL (
      SELECT m.id, m.priority, m.run_at, m.sender, m.to_domain FROM mailroom.messages m
      WHERE m.status = 'queued'
        AND m.priority = p.priority
        AND m.run_at <= p_now
        AND (p_sender IS NULL OR m.sender = p_sender)
        AND m.sender <> ALL (v_snd_blocked)
        AND m.to_domain <> ALL (v_dom_blocked)
      ORDER BY m.run_at, m.id
      LIMIT v_scan
      FOR UPDATE SKIP LOCKED
    ) due
    LIMIT v_scan
  ),
  picked AS (
    SELECT c.id
    FROM (SELECT c.id, c.priority, c.run_at, c.sender, c.to_domain,
                 row_number() OVER (PARTITION BY c.to_domain ORDER BY c.priority DESC, c.run_at, c.id) AS nth_to_domain,
                 row_number() OVER (PARTITION BY c.sender ORDER BY c.priority DESC, c.run_at, c.id) AS nth_of_sender
          FROM candidates c) AS c
    LEFT JOIN unnest(v_dom_names, v_dom_caps) AS dc(domain, cap) ON dc.domain = c.to_domain
    LEFT JOIN unnest(v_snd_names, v_snd_caps) AS sc(name, cap) ON sc.name = c.sender
    WHERE c.nth_to_domain <= coalesce(dc.cap, v_dom_default, 2147483647)
      AND c.nth_of_sender <= coalesce(sc.cap, 2147483647)
    ORDER BY c.priority DESC, c.run_at, c.id
    LIMIT v_budget
  ),
  claimed AS (
    UPDATE mailroom.messages m
    SET status       = 'sending',
        attempts     = m.attempts + 1,
        lease_token  = v_token,
        leased_until = p_now + p_lease,
        worker       = p_worker,
        claimed_at   = greatest(p_now, m.updated_at),
        updated_at   = greatest(p_now, m.updated_at)
    FROM picked
    WHERE m.id = picked.id
    RETURNING m.*
  )
  SELECT c.id, c.lease_token, c.leased_until, c.delivery_key, c.attempts, c.max_attempts,
         c.sender, c.to_address, c.subject, c.body_text, c.body_html, c.headers,
         c.template_key, c.template_vars, c.on_ambiguous
  FROM claimed c
  ORDER BY c.priority DESC, c.run_at, c.id;

  -- 4. Spend the budgets on what was claimed, before the locks go at commit,
  --    in one statement for all of them. This batch is found through the
  --    reclaim index (status 'sending', its leased_until) and its token.
  IF cardinality(v_snd_names) > 0 OR v_dom_limited THEN
    WITH batch AS (
      SELECT m.sender, m.to_domain
      FROM mailroom.messages m
      WHERE m.status = 'sending' AND m.leased_until = p_now + p_lease AND m.lease_token = v_token
    ),
    spent AS (
      SELECT 'mailroom/sender/' || b.sender AS prefix, count(*)::integer AS n,
             s.max_per_second AS per_second, s.max_per_minute AS per_minute
      FROM batch b
      JOIN mailroom.senders s ON s.name = b.sender
      WHERE b.sender = ANY (v_snd_names)
      GROUP BY b.sender, s.max_per_second, s.max_per_minute
      UNION ALL
      SELECT 'mailroom/domain/' || b.to_domain, count(*)::integer,
             CASE WHEN e.domain IS NULL THEN v_def_second ELSE e.max_per_second END,
             CASE WHEN e.domain IS NULL THEN v_def_minute ELSE e.max_per_minute END
      FROM batch b
      LEFT JOIN mailroom.domain_limits e ON e.domain = b.to_domain
      WHERE v_dom_limited
      GROUP BY b.to_domain, e.domain, e.max_per_second, e.max_per_minute
    )
    SELECT coalesce(array_agg(sp.prefix || w.suffix), '{}'), coalesce(array_agg(sp.n), '{}'),
           coalesce(array_agg(w.win), '{}')
      INTO v_keys, v_counts, v_windows
    FROM spent sp
    CROSS JOIN LATERAL (VALUES ('/s', interval '1 second', sp.per_second),
                               ('/m', interval '1 minute', sp.per_minute)) AS w(suffix, win, lim)
    WHERE w.lim IS NOT NULL;
    IF cardinality(v_keys) > 0 THEN
      PERFORM mailroom._send_rate_record(v_keys, v_counts, v_windows, p_now);
    END IF;
  END IF;
END
$$;
ALTER FUNCTION mailroom.claim_batch(text, integer, interval, text, timestamptz) OWNER TO mailroom_owner;
REVOKE ALL ON FUNCTION mailroom.claim_batch(text, integer, interval, text, timestamptz) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION mailroom.claim_batch(text, integer, interval, text, timestamptz) TO mailroom_runner;
COMMENT ON FUNCTION mailroom.claim_batch(text, integer, interval, text, timestamptz) IS
  'Lease up to p_limit due mail (highest priority, then oldest run_at) to p_worker for p_lease under one fresh lease token; NULL p_sender takes any sender. Each claim counts an attempt, stamped no earlier than the row''s last change; its ledger row is written when the lease ends. Grants no more than the send rates allow right now (mailroom.senders per sender, mailroom.domain_limits per recipient domain, summed over all runners) and skips mail to senders and domains at their limit in favour of other mail.';

COMMENT ON TABLE mailroom.attempts IS
  'The delivery ledger: one row per claim of a message and what became of it, written when the claim ends (while in flight the lease is on the message). Duplicates and replays show here.';
COMMENT ON COLUMN mailroom.attempts.outcome IS
  'What the queue made of the attempt: sent, retry, failed, ambiguous, expired (lease ran out), stale (reported after the lease was lost), released (handed back unsent). NULL only on a row opened by a claim_batch before v0.3.0 whose lease has not ended.';

ALTER FUNCTION mailroom.claim_batch(text, integer, interval, text, timestamptz) OWNER TO mailroom_owner;
REVOKE ALL ON FUNCTION mailroom.claim_batch(text, integer, interval, text, timestamptz) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION mailroom.claim_batch(text, integer, interval, text, timestamptz) TO mailroom_runner;

COMMIT;
