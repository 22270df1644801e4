-- Revert mailroom:mark_outcomes from pg: back to the v0.3.0 functions (with p_now), on mailroom.messages,
-- which split_messages' revert (next) restores as a table.

-- The ledger is written once per attempt, when the attempt ends. Until v0.2.0
-- claim_batch inserted an open row and mark_outcomes updated it: two writes of
-- one row per mail, the second never HOT (the ledger's partial indexes name
-- the columns it sets), which cost more than the claim and the report
-- together (bench/drain.py's breakdown). The open lease is on the message
-- (lease_token, worker, claimed_at, attempts) until it ends; then one insert
-- records it. Rows opened by an older claim_batch are still completed here.

BEGIN;

DROP FUNCTION mailroom.mark_outcome(bigint, uuid, text, text, integer, text, text);
DROP FUNCTION mailroom._mark_outcome(bigint, uuid, text, text, integer, text, text, timestamptz);
DROP FUNCTION mailroom.mark_outcomes(jsonb);
DROP FUNCTION mailroom._mark_outcomes(jsonb, timestamptz);

CREATE OR REPLACE FUNCTION mailroom.mark_outcomes(p_results jsonb, p_now timestamptz DEFAULT now())
RETURNS integer
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = mailroom, pg_temp
-- Every lookup is by a given key (a report's message id and lease token):
-- plan each call with the table's real size, and only as nested loops over
-- index lookups. A hash join over the ledger, which a plan made while the
-- ledger was small (or freshly truncated) picks, reads the whole ledger on
-- every call: bench/drain.py's SQL went from 15,000 to 10,000 mails/s at
-- 100,000 mails, slower as the ledger grew (see also v0.2.0).
SET plan_cache_mode = force_custom_plan
SET enable_seqscan = off
SET enable_hashjoin = off
SET enable_mergejoin = off
AS $$
DECLARE
  v_index   bigint;
  v_problem text;
  v_applied integer;
  v_bounced text[];
BEGIN
  IF p_results IS NULL OR jsonb_typeof(p_results) <> 'array' THEN
    RAISE EXCEPTION 'mailroom: results: must be a JSON array of outcome objects'
      USING ERRCODE = '22023';
  END IF;

  SELECT x.idx, x.problem INTO v_index, v_problem
  FROM (
    SELECT t.ord - 1 AS idx,
      CASE
        WHEN jsonb_typeof(t.e) <> 'object' THEN ': must be an object'
        WHEN NOT t.e ? 'id' THEN '.id: missing'
        WHEN jsonb_typeof(t.e -> 'id') <> 'number' OR (t.e ->> 'id') !~ '^[0-9]{1,18}$'
          THEN '.id: must be a positive integer'
        WHEN NOT t.e ? 'token' THEN '.token: missing'
        WHEN jsonb_typeof(t.e -> 'token') <> 'string'
          OR (t.e ->> 'token') !~* '^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$'
          THEN '.token: must be a UUID string'
        WHEN NOT t.e ? 'outcome' THEN '.outcome: missing'
        WHEN jsonb_typeof(t.e -> 'outcome') <> 'string'
          OR (t.e ->> 'outcome') NOT IN ('sent', 'retry', 'failed', 'ambiguous')
          THEN format('.outcome: unknown outcome %s (expected sent, retry, failed or ambiguous)', t.e -> 'outcome')
        WHEN jsonb_typeof(t.e -> 'smtp_code') NOT IN ('number', 'null')
          OR (t.e ->> 'smtp_code') !~ '^[2-5][0-9][0-9]$'
          THEN '.smtp_code: must be a number from 200 to 599'
        WHEN jsonb_typeof(t.e -> 'smtp_enhanced') NOT IN ('string', 'null')
          OR (t.e ->> 'smtp_enhanced') !~ '^[245]\.[0-9]{1,3}\.[0-9]{1,3}$'
          THEN '.smtp_enhanced: must be an enhanced status code such as 5.1.1'
        WHEN jsonb_typeof(t.e -> 'detail') NOT IN ('string', 'null') THEN '.detail: must be a string'
        WHEN jsonb_typeof(t.e -> 'provider_id') NOT IN ('string', 'null') THEN '.provider_id: must be a string'
      END AS problem
    FROM jsonb_array_elements(p_results) WITH ORDINALITY AS t(e, ord)
  ) x
  WHERE x.problem IS NOT NULL
  ORDER BY x.idx
  LIMIT 1;
  IF FOUND THEN
    RAISE EXCEPTION 'mailroom: results[%]%', v_index, v_problem USING ERRCODE = '22023';
  END IF;

  SELECT (e ->> 'id') INTO v_problem
  FROM jsonb_array_elements(p_results) AS e
  GROUP BY e ->> 'id' HAVING count(*) > 1 LIMIT 1;
  IF FOUND THEN
    RAISE EXCEPTION 'mailroom: results: id % appears more than once', v_problem USING ERRCODE = '22023';
  END IF;

  -- Lock the messages first (in id order, so batches cannot deadlock): a
  -- concurrent report for the same message then waits, and the statement
  -- below sees its ledger row, so a second successful send is always flagged.
  PERFORM 1 FROM mailroom.messages m
  WHERE m.id IN (SELECT (e ->> 'id')::bigint FROM jsonb_array_elements(p_results) AS e)
  ORDER BY m.id
  FOR UPDATE;

  -- One row per report, joined to its (locked) message by primary key.
  WITH input AS (
    SELECT r.*, m.to_address, m.delivery_key, m.worker, m.claimed_at,
      m.status = 'sending' AND m.lease_token = r.token AS is_live,
      CASE
        WHEN r.outcome = 'sent' THEN 'sent'
        WHEN r.outcome = 'failed' THEN 'failed'
        WHEN r.outcome = 'ambiguous' AND m.on_ambiguous = 'review' THEN 'review'
        WHEN m.attempts >= m.max_attempts THEN 'failed'
        ELSE 'queued'
      END AS new_status,
      -- A report for a lease that was lost: if it says the mail went out and
      -- the message is not sent or being sent again, that settles it.
      r.outcome = 'sent'
        AND m.status IN ('queued', 'review', 'failed', 'paused', 'cancelled')
        AND EXISTS (SELECT FROM mailroom.attempts a
                    WHERE a.message_id = r.id AND a.lease_token = r.token AND a.reported IS NULL)
        AS settles,
      m.attempts
    FROM jsonb_to_recordset(p_results) AS r(id bigint, token uuid, outcome text, smtp_code integer,
                                            smtp_enhanced text, detail text, provider_id text)
    JOIN mailroom.messages m ON m.id = r.id
  ),
  moved AS (
    UPDATE mailroom.messages m
    SET status        = i.new_status,
        status_reason = CASE i.new_status
                          WHEN 'queued' THEN 'retry'
                          WHEN 'review' THEN 'ambiguous outcome'
                          WHEN 'failed' THEN CASE WHEN i.outcome = 'failed' THEN 'permanent failure'
                                                  ELSE 'attempts exhausted' END
                        END,
        run_at        = CASE WHEN i.new_status = 'queued' THEN p_now + mailroom._retry_delay(i.attempts)
                             ELSE m.run_at END,
        lease_token   = NULL,
        leased_until  = NULL,
        sent_at       = CASE WHEN i.new_status = 'sent' THEN p_now END,
        last_error    = CASE WHEN i.outcome = 'sent' THEN m.last_error
                             ELSE left(concat_ws(' ', i.smtp_code, i.smtp_enhanced, i.detail), 1000) END,
        updated_at    = p_now
    FROM input i
    WHERE m.id = i.id AND i.is_live
    RETURNING m.id
  ),
  settled AS (
    UPDATE mailroom.messages m
    SET status = 'sent', status_reason = 'late outcome', sent_at = p_now, updated_at = p_now
    FROM input i
    WHERE m.id = i.id AND NOT i.is_live AND i.settles
    RETURNING m.id
  ),
  -- The ledger row of the reported lease. A live lease has none yet: the
  -- claim left it on the message, and the row is written once, now. A lease
  -- that ended without a report has one that reclaim wrote (expired), and
  -- claims made before v0.3.0 have one opened at claim time: those are
  -- completed. A repeated report (a runner re-sends after a reconnect) finds
  -- its row reported already and changes nothing.
  ledger_completed AS (
    UPDATE mailroom.attempts a
    SET reported      = i.outcome,
        outcome       = CASE WHEN i.is_live THEN i.outcome ELSE 'stale' END,
        -- A late report keeps the time its lease expired.
        finished_at   = coalesce(a.finished_at, p_now),
        reported_at   = p_now,
        smtp_code     = i.smtp_code,
        smtp_enhanced = i.smtp_enhanced,
        smtp_text     = left(i.detail, 1000),
        provider_id   = left(i.provider_id, 255),
        duplicate     = i.outcome = 'sent' AND EXISTS (
                          SELECT FROM mailroom.attempts prior
                          WHERE prior.message_id = i.id AND prior.reported = 'sent' AND prior.id <> a.id)
    FROM input i
    WHERE a.message_id = i.id AND a.lease_token = i.token AND a.reported IS NULL
    RETURNING a.message_id
  ),
  ledger_written AS (
    INSERT INTO mailroom.attempts (message_id, delivery_key, attempt, worker, lease_token, claimed_at,
                                   finished_at, reported_at, reported, outcome, smtp_code, smtp_enhanced,
                                   smtp_text, provider_id, duplicate)
    SELECT i.id, i.delivery_key, i.attempts, i.worker, i.token, i.claimed_at,
           p_now, p_now, i.outcome, i.outcome, i.smtp_code, i.smtp_enhanced,
           left(i.detail, 1000), left(i.provider_id, 255),
           i.outcome = 'sent' AND EXISTS (SELECT FROM mailroom.attempts prior
                                          WHERE prior.message_id = i.id AND prior.reported = 'sent')
    FROM input i
    -- A live lease has a row only if an older claim_batch opened it, and
    -- ledger_completed has just completed that one.
    WHERE i.is_live AND i.id NOT IN (SELECT c.message_id FROM ledger_completed c)
    RETURNING id
  ),
  bounced AS (
    INSERT INTO mailroom.suppressions AS s (address_key, address, reason, source, created_at)
    SELECT DISTINCT ON (mailroom._address_key(l.to_address))
           mailroom._address_key(l.to_address), l.to_address, 'hard_bounce',
           left('smtp ' || concat_ws(' ', l.smtp_code, l.smtp_enhanced, l.detail), 200), p_now
    FROM input l
    WHERE l.is_live AND l.outcome = 'failed' AND l.smtp_enhanced LIKE '5.1.%'
    ON CONFLICT (address_key) DO NOTHING
    RETURNING s.address_key
  )
  SELECT (SELECT count(*) FROM moved)::integer,
         (SELECT array_agg(address_key) FROM bounced),
         (SELECT count(*) FROM settled) + (SELECT count(*) FROM ledger_completed)
           + (SELECT count(*) FROM ledger_written)
  INTO v_applied, v_bounced, v_index;

  -- Other mail already queued to a hard-bounced address will bounce too.
  IF v_bounced IS NOT NULL THEN
    UPDATE mailroom.messages m
    SET status = 'cancelled', status_reason = 'suppressed', updated_at = p_now
    WHERE mailroom._address_key(m.to_address) = ANY (v_bounced)
      AND m.status IN ('queued', 'paused');
  END IF;

  RETURN v_applied;
END
$$;
ALTER FUNCTION mailroom.mark_outcomes(jsonb, timestamptz) OWNER TO mailroom_owner;
COMMENT ON FUNCTION mailroom.mark_outcomes(jsonb, timestamptz) IS
  'Record a batch of outcomes [{id, token, outcome: sent|retry|failed|ambiguous, smtp_code, smtp_enhanced, detail, provider_id}] in one call. Returns how many applied. Writes each attempt''s ledger row once, as it ends (the lease lives on the message until then); a report under a lost lease completes the row reclaim wrote (stale) and may settle the message as sent. Planned afresh on every call without sequential scans.';

ALTER FUNCTION mailroom.mark_outcomes(jsonb, timestamptz) OWNER TO mailroom_owner;
REVOKE ALL ON FUNCTION mailroom.mark_outcomes(jsonb, timestamptz) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION mailroom.mark_outcomes(jsonb, timestamptz) TO mailroom_runner;

CREATE OR REPLACE FUNCTION mailroom.mark_outcome(
  p_id            bigint,
  p_token         uuid,
  p_outcome       text,
  p_detail        text        DEFAULT NULL,
  p_smtp_code     integer     DEFAULT NULL,
  p_smtp_enhanced text        DEFAULT NULL,
  p_provider_id   text        DEFAULT NULL,
  p_now           timestamptz DEFAULT now()
)
RETURNS boolean
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = mailroom, pg_temp
AS $$
BEGIN
  IF p_id IS NULL OR p_token IS NULL THEN
    RAISE EXCEPTION 'mailroom: id and token: both are required' USING ERRCODE = '22023';
  END IF;
  IF p_outcome IS NULL OR p_outcome NOT IN ('sent', 'retry', 'failed', 'ambiguous') THEN
    RAISE EXCEPTION 'mailroom: outcome: unknown outcome "%" (expected sent, retry, failed or ambiguous)', p_outcome
      USING ERRCODE = '22023';
  END IF;
  RETURN mailroom.mark_outcomes(
    jsonb_build_array(jsonb_strip_nulls(jsonb_build_object(
      'id', p_id, 'token', p_token, 'outcome', p_outcome, 'detail', p_detail,
      'smtp_code', p_smtp_code, 'smtp_enhanced', p_smtp_enhanced, 'provider_id', p_provider_id))),
    p_now) = 1;
END
$$;
ALTER FUNCTION mailroom.mark_outcome(bigint, uuid, text, text, integer, text, text, timestamptz) OWNER TO mailroom_owner;
REVOKE ALL ON FUNCTION mailroom.mark_outcome(bigint, uuid, text, text, integer, text, text, timestamptz) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION mailroom.mark_outcome(bigint, uuid, text, text, integer, text, text, timestamptz) TO mailroom_runner;
COMMENT ON FUNCTION mailroom.mark_outcome(bigint, uuid, text, text, integer, text, text, timestamptz) IS
  'Record one outcome; forwards to mark_outcomes. True when it applied, false when the lease token was stale.';


COMMIT;
