-- Deploy mailroom:mark_outcomes to pg
-- requires: mark_outcomes@v0.3.0
-- requires: split_messages
-- requires: circuit_breaker

-- v0.4: outcomes on the split tables (see split_messages).
--
-- - A final outcome (sent; failed; retry or ambiguous with the attempts
--   spent) finishes the mail: its queue row is deleted and the attempt's
--   ledger row, inserted in the same statement, is its finishing row
--   (finished_as, status_reason, last_error).
-- - A retry goes back to queued with backoff, an ambiguous outcome to review
--   or queued (on_ambiguous). Nothing here checks suppressions, pauses or
--   schedules: the gate in claim_batch does, at the next claim, so nothing
--   decided while the mail was in flight can be escaped (issue 13, holes 1
--   and 2). A hard bounce (5.1.x) adds the suppression; the gate stops every
--   other mail to the address.
-- - Sent mail and hard bounces count against their campaign's and sender's
--   circuit breaker (circuit_breaker), which may pause either.
-- - A report whose lease no longer matches writes only the ledger: it
--   completes the row reclaim or release wrote (stale), and a late 'sent'
--   settles mail still waiting (queued, review, paused) as sent.
--
-- Duplicates (a successful report for mail that already had one) must be
-- flagged whatever the interleaving. Concurrent reports for one message
-- serialise on its queue row, and the probe for an earlier success runs in
-- a statement that starts after that row lock is held, so under READ
-- COMMITTED it sees the other report once it committed. Under REPEATABLE
-- READ the snapshot is older than the lock, so these functions refuse to
-- run there (issue 13, hole 3). The probe is needed only where an earlier
-- success can exist: a lost lease, or mail that was handed out before
-- (attempts > 1, or a status_reason left by whatever handed it back: a
-- release, which does not count the attempt, or an operator's retry, which
-- resets the count). The first claim of fresh mail reported on its live
-- lease (nearly every report) is applied by one statement with no ledger
-- read and no separate row lock (the DELETE or UPDATE locks the row it
-- changes).
--
-- No p_now on what runners execute (issue 13, hole 4): mark_outcomes and
-- mark_outcome use the database clock; the owner-only twins _mark_outcomes
-- and _mark_outcome take p_now for tests.

BEGIN;

DROP FUNCTION mailroom.mark_outcome(bigint, uuid, text, text, integer, text, text, timestamptz);
DROP FUNCTION mailroom.mark_outcomes(jsonb, timestamptz);

CREATE OR REPLACE FUNCTION mailroom._retry_delay(p_attempts integer)
RETURNS interval
LANGUAGE sql VOLATILE
SET search_path = mailroom, pg_temp
AS $$
  -- Exponential backoff with "equal jitter": half the delay is fixed, half
  -- random, so a burst of failures does not come back as a burst.
  SELECT make_interval(secs =>
    least(extract(epoch FROM mailroom._setting('retry_backoff_base')::interval)
            * power(2, least(greatest(p_attempts - 1, 0), 30)),
          extract(epoch FROM mailroom._setting('retry_backoff_max')::interval))
    * (0.5 + random() * 0.5))
$$;
ALTER FUNCTION mailroom._retry_delay(integer) OWNER TO mailroom_owner;
REVOKE ALL ON FUNCTION mailroom._retry_delay(integer) FROM PUBLIC;
COMMENT ON FUNCTION mailroom._retry_delay(integer) IS
  'Internal: delay before the next try after p_attempts attempts: base * 2^(attempts-1), capped, with jitter.';

CREATE FUNCTION mailroom._mark_outcomes(p_results jsonb, p_now timestamptz DEFAULT now())
RETURNS integer
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = mailroom, pg_temp
-- Every lookup is by a given key (a report's message id, its lease token):
-- nested loops over index lookups, whatever the tables' sizes were when a
-- plan was cached. (v0.3 re-planned every statement of every call for the
-- same purpose, about 1 ms a call; these settings cost a few microseconds.)
SET enable_seqscan = off
SET enable_hashjoin = off
SET enable_mergejoin = off
-- ... and never JIT-compiled: a disabled plan node costs 1e10, far above jit_above_cost.
SET jit = off
-- With those plans fixed, one generic plan per statement and session: a
-- custom plan would be made again on every call (its estimate looks cheaper).
SET plan_cache_mode = force_generic_plan
AS $$
DECLARE
  v_index   bigint;
  v_problem text;
  v_suspect boolean;
  v_twice    boolean := true;           -- an id may be there twice
  v_applied integer := 0;
  v_fold    boolean;                    -- the lean statement's pending rows passed a multiple of 200
  v_n       integer;
  v_total   integer;
  -- Finished now, for the circuit breaker, one element per mail: the
  -- campaigns and senders of what was delivered (sent, and hard-bounced
  -- during the SMTP conversation, 5.1.x), and of those hard bounces.
  v_delivered_campaigns bigint[] := '{}';
  v_delivered_senders   text[] := '{}';
  v_bounced_campaigns   bigint[] := '{}';
  v_bounced_senders     text[] := '{}';
BEGIN
  IF current_setting('transaction_isolation') <> 'read committed' THEN
    RAISE EXCEPTION 'mailroom: transaction_isolation: mark_outcomes runs only under READ COMMITTED, not %',
      current_setting('transaction_isolation') USING ERRCODE = '0A000';
  END IF;
  IF p_results IS NULL OR jsonb_typeof(p_results) <> 'array' THEN
    RAISE EXCEPTION 'mailroom: results: must be a JSON array of outcome objects'
      USING ERRCODE = '22023';
  END IF;

  -- The lean statement: a delivered first attempt reported on its live
  -- lease (nearly every report) finishes with one read of the batch. The
  -- reports are read into the types they are stored as, and a report is
  -- applied here only if it is exactly what the checks further down accept
  -- and says sent: the id a JSON integer of at most 18 digits (an id that is
  -- a string, or not an integer, fails its cast), the token a string the
  -- uuid type reads, the SMTP code a JSON integer from 200 to 599, the
  -- enhanced status in its pattern, detail and provider_id JSON strings.
  -- A cast that fails (a report that is no object, a token that is no UUID,
  -- a code that is a string) undoes the statement, and the rest of the
  -- function reads the batch again: it names the element and the problem,
  -- or applies what the lean statement may not (other outcomes, later
  -- attempts, lost leases). What it applied stays applied and counts; an
  -- error raised further down undoes it with the rest of the call. The
  -- whole-batch checks used to come first and cost a report of 50 more
  -- than its ledger rows did (bench/RESULTS.md).
  BEGIN
    WITH r AS (
      -- (id and smtp_code as json: their text is the JSON's, so a string's
      -- quotes fail the integer cast; detail and provider_id as jsonb, whose
      -- type says whether they are strings.)
      SELECT r.id::text::bigint AS id, r.token, r.smtp_code::text::integer AS smtp_code,
             r.smtp_enhanced, r.detail #>> '{}' AS detail, r.provider_id #>> '{}' AS provider_id
      FROM jsonb_to_recordset(p_results) AS r(id json, token uuid, outcome text, smtp_code json, smtp_enhanced text,
                                               detail jsonb, provider_id jsonb)
      WHERE r.outcome = 'sent'
        AND r.id::text::bigint BETWEEN 0 AND 999999999999999999
        AND (r.smtp_code IS NULL OR r.smtp_code::text::integer BETWEEN 200 AND 599)
        AND (r.smtp_enhanced IS NULL OR r.smtp_enhanced ~ '^[245]\.[0-9]{1,3}\.[0-9]{1,3}$')
        AND (r.detail IS NULL OR jsonb_typeof(r.detail) = 'string')
        AND (r.provider_id IS NULL OR jsonb_typeof(r.provider_id) = 'string')
    ),
    -- (The id matched as q.id = ANY (ARRAY[r.id]), not q.id = r.id: see the
    -- general statement below.)
    finished AS (
      DELETE FROM mailroom.queue q
      USING r
      WHERE q.id = ANY (ARRAY[r.id]) AND q.lease_token = r.token AND q.leased_until IS NOT NULL
        AND q.attempts = 1 AND q.status_reason IS NULL
      RETURNING q.id, q.attempts, q.worker, q.claimed_at, q.last_error, q.sender, q.campaign_id, r.token,
                r.smtp_code, r.smtp_enhanced, r.detail, r.provider_id
    ),
    ledger AS (
      INSERT INTO mailroom.attempts (message_id, attempt, worker, lease_token, claimed_at, finished_at, reported_at,
                                     reported, outcome, smtp_code, smtp_enhanced, smtp_text, provider_id, duplicate,
                                     finished_as, last_error)
      SELECT f.id, f.attempts, f.worker, f.token, f.claimed_at, p_now, p_now, 'sent', 'sent', f.smtp_code,
             f.smtp_enhanced, left(f.detail, 1000), left(f.provider_id, 255), false, 'sent', f.last_error
      FROM finished f
    ),
    -- The circuit breaker's count of this delivered mail, the same
    -- statement as _breaker_count_outcomes's (one pending row per sender
    -- and campaign), written here: no call, and no arrays of the mails'
    -- campaigns and senders to build.
    counted AS (
      INSERT INTO mailroom.breaker_pending (sender, campaign_id, delivered, recorded_at)
      SELECT f.sender, f.campaign_id, count(*), p_now FROM finished f GROUP BY f.sender, f.campaign_id
      RETURNING id
    )
    SELECT (SELECT count(*) FROM finished), (SELECT coalesce(bool_or(c.id % 200 = 0), false) FROM counted c)
      INTO v_applied, v_fold;
  EXCEPTION WHEN data_exception THEN
    v_applied := 0;
    v_fold := false;
  END;
  -- (The fold's turn as _breaker_count_outcomes takes it.)
  IF v_fold THEN
    PERFORM mailroom.breaker_fold();
  END IF;
  v_total := jsonb_array_length(p_results);
  IF v_applied = v_total THEN
    RETURN v_applied;
  END IF;

  -- The rest of the batch: it is checked whole before anything more is
  -- applied. Most such batches are well formed too (a retry among sent
  -- mail), and naming the element and the problem costs a look at every
  -- field of every element. So two whole-batch tests come first. One jsonpath
  -- for the elements and the JSON types of the keys every element has
  -- (strict: an element that is itself an array is not unwrapped; a
  -- missing key leaves the test unknown rather than failed, and the second
  -- test catches it; the optional keys are left to the second test, as
  -- strict mode pays for every key it does not find). Then the values, each
  -- element read once (and whether an id is there twice), the id as a
  -- bigint and the token as a UUID: the casts say in C what patterns over
  -- the text said (an id that is no integer, a token that is no UUID: the
  -- cast fails and the batch is suspect), for 0.1 ms less a report of 50. The two may suspect a batch that the per-element check then passes
  -- (it has the last word), but pass nothing it would refuse.
  v_suspect := jsonb_path_exists(p_results,
    'strict $[*] ? (@.type() != "object"
                    || @.id.type() != "number" || @.token.type() != "string" || @.outcome.type() != "string")');
  IF NOT v_suspect THEN
    BEGIN
      SELECT coalesce(bool_or(
           r.id IS NULL OR r.id < 0 OR r.id > 999999999999999999
             OR r.token IS NULL
             OR r.outcome IS NULL OR r.outcome NOT IN ('sent', 'retry', 'failed', 'ambiguous')
             -- (A JSON null reads as SQL NULL: it passes, as it should.)
             OR jsonb_typeof(r.smtp_code) <> 'number' OR r.smtp_code::text !~ '^[2-5][0-9][0-9]$'
             OR jsonb_typeof(r.smtp_enhanced) <> 'string' OR r.smtp_enhanced #>> '{}' !~ '^[245]\.[0-9]{1,3}\.[0-9]{1,3}$'
             OR jsonb_typeof(r.detail) <> 'string' OR jsonb_typeof(r.provider_id) <> 'string'), false),
             count(DISTINCT r.id) < count(*)
        INTO v_suspect, v_twice
      FROM jsonb_to_recordset(p_results)
        AS r(id bigint, token uuid, outcome text, smtp_code jsonb, smtp_enhanced jsonb, detail jsonb, provider_id jsonb);
    EXCEPTION WHEN data_exception THEN
      -- (The block's subtransaction only read: it costs no transaction id.)
      v_suspect := true;
    END;
  END IF;
  IF v_suspect THEN
    SELECT x.idx, x.problem INTO v_index, v_problem
    FROM (
      SELECT t.ord - 1 AS idx,
        CASE
          WHEN jsonb_typeof(t.e) <> 'object' THEN ': must be an object'
          WHEN NOT t.e ? 'id' THEN '.id: missing'
          WHEN jsonb_typeof(t.e -> 'id') <> 'number' OR (t.e ->> 'id') !~ '^[0-9]+$' OR length(t.e ->> 'id') > 18
            THEN '.id: must be a positive integer'
          WHEN NOT t.e ? 'token' THEN '.token: missing'
          -- (What the uuid type reads: 32 hex digits, a hyphen allowed after
          -- any four but the last, the whole in braces or not.)
          WHEN jsonb_typeof(t.e -> 'token') <> 'string'
            OR (t.e ->> 'token') !~ '^(\{[0-9a-fA-F]{4}(-?[0-9a-fA-F]{4}){7}\}|[0-9a-fA-F]{4}(-?[0-9a-fA-F]{4}){7})$'
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
  END IF;

  IF v_twice THEN
    SELECT (e ->> 'id') INTO v_problem
    FROM jsonb_array_elements(p_results) AS e
    GROUP BY e ->> 'id' HAVING count(*) > 1 LIMIT 1;
    IF FOUND THEN
      RAISE EXCEPTION 'mailroom: results: id % appears more than once', v_problem USING ERRCODE = '22023';
    END IF;
  END IF;
  -- Pass 1 applies the reports of the first claim of fresh mail; pass 2,
  -- only if some report is left, first locks the queue rows of all (in id
  -- order, so batches cannot deadlock) and then applies the live ones with
  -- the duplicate probe. See the header for why the lock comes first.
  FOR v_pass IN 1 .. 2 LOOP
    IF v_pass = 2 THEN
      EXIT WHEN v_applied = v_total;
      PERFORM FROM mailroom.queue q
      WHERE q.id = ANY (ARRAY(SELECT (e ->> 'id')::bigint FROM jsonb_array_elements(p_results) AS e))
      ORDER BY q.id
      FOR UPDATE;
      -- Mail that already finished has no queue row: late reports for it
      -- serialise on its finishing ledger row instead.
      PERFORM FROM mailroom.attempts a
      WHERE a.message_id = ANY (ARRAY(SELECT (e ->> 'id')::bigint FROM jsonb_array_elements(p_results) AS e))
        AND a.finished_as IS NOT NULL
      ORDER BY a.message_id
      FOR UPDATE;
    END IF;

    WITH r AS (
      SELECT * FROM jsonb_to_recordset(p_results) AS r(id bigint, token uuid, outcome text, smtp_code integer,
                                                         smtp_enhanced text, detail text, provider_id text)
    ),
    -- Final outcomes leave the hot queue ... (A live lease: its token, and a
    -- deadline, which the table's check constraint allows only while
    -- sending. Written so, and not as status = 'sending', the condition
    -- cannot lead a cached plan to walk the reclaim index over every lease
    -- in flight: each report is one primary-key lookup. And the id is
    -- matched as q.id = ANY (ARRAY[r.id]), not q.id = r.id: the plan is
    -- generic, made once per session, and an equality join planned while
    -- the queue was small walks the whole primary-key index on every later
    -- call, ever slower as the queue grows (84 ms a call at 300,000 queued
    -- against 1.3 ms); the ANY form cannot drive a merge-ordered scan of
    -- the queue, so the reports drive and each is one index lookup.)
    finished AS (
      DELETE FROM mailroom.queue q
      USING r
      WHERE q.id = ANY (ARRAY[r.id]) AND q.lease_token = r.token AND q.leased_until IS NOT NULL
        AND (v_pass = 2 OR (q.attempts = 1 AND q.status_reason IS NULL))
        AND (r.outcome IN ('sent', 'failed')
             OR (q.attempts >= q.max_attempts AND NOT (r.outcome = 'ambiguous' AND q.on_ambiguous = 'review')))
      RETURNING q.id, q.attempts, q.worker, q.claimed_at, q.last_error, q.sender, q.campaign_id, r.token, r.outcome,
                r.smtp_code, r.smtp_enhanced, r.detail, r.provider_id
    ),
    -- ... the others stay live, for the gate of the next claim.
    kept AS (
      UPDATE mailroom.queue q
      SET status        = CASE WHEN r.outcome = 'ambiguous' AND q.on_ambiguous = 'review' THEN 'review' ELSE 'queued' END,
          status_reason = CASE WHEN r.outcome = 'ambiguous' AND q.on_ambiguous = 'review' THEN 'ambiguous outcome'
                               ELSE 'retry' END,
          run_at        = CASE WHEN r.outcome = 'ambiguous' AND q.on_ambiguous = 'review' THEN q.run_at
                               ELSE p_now + mailroom._retry_delay(q.attempts) END,
          lease_token   = NULL,
          leased_until  = NULL,
          last_error    = left(concat_ws(' ', r.smtp_code, r.smtp_enhanced, r.detail), 1000),
          updated_at    = p_now
      FROM r
      WHERE q.id = ANY (ARRAY[r.id]) AND q.lease_token = r.token AND q.leased_until IS NOT NULL
        AND (v_pass = 2 OR (q.attempts = 1 AND q.status_reason IS NULL))
        AND r.outcome IN ('retry', 'ambiguous')
        AND (q.attempts < q.max_attempts OR (r.outcome = 'ambiguous' AND q.on_ambiguous = 'review'))
      RETURNING q.id, q.attempts, q.worker, q.claimed_at, r.token, r.outcome, r.smtp_code, r.smtp_enhanced,
                r.detail, r.provider_id
    ),
    ledger AS (
      INSERT INTO mailroom.attempts (message_id, attempt, worker, lease_token, claimed_at, finished_at, reported_at,
                                     reported, outcome, smtp_code, smtp_enhanced, smtp_text, provider_id, duplicate,
                                     finished_as, status_reason, last_error, finish_key)
      SELECT f.id, f.attempts, f.worker, f.token, f.claimed_at, p_now, p_now,
             f.outcome, f.outcome, f.smtp_code, f.smtp_enhanced, left(f.detail, 1000), left(f.provider_id, 255),
             f.outcome = 'sent' AND v_pass = 2
               AND EXISTS (SELECT FROM mailroom.attempts p WHERE p.message_id = f.id AND p.reported = 'sent'),
             CASE WHEN f.outcome = 'sent' THEN 'sent' ELSE 'failed' END,
             CASE WHEN f.outcome = 'sent' THEN NULL
                  WHEN f.outcome = 'failed' THEN 'permanent failure'
                  ELSE 'attempts exhausted' END,
             CASE WHEN f.outcome = 'sent' THEN f.last_error
                  ELSE left(concat_ws(' ', f.smtp_code, f.smtp_enhanced, f.detail), 1000) END,
             0
      FROM finished f
      UNION ALL
      SELECT k.id, k.attempts, k.worker, k.token, k.claimed_at, p_now, p_now,
             k.outcome, k.outcome, k.smtp_code, k.smtp_enhanced, left(k.detail, 1000), left(k.provider_id, 255),
             false, NULL, NULL, NULL, nextval('mailroom.attempts_id_seq')
      FROM kept k
    ),
    -- A hard bounce suppresses the address for all streams (stream NULL);
    -- the claim gate then stops every other mail to it (no address index
    -- needed here).
    bounced AS (
      INSERT INTO mailroom.suppressions AS s (address_key, address, reason, source, created_at)
      SELECT DISTINCT ON (mailroom._address_key(c.to_address))
             mailroom._address_key(c.to_address), c.to_address, 'hard_bounce',
             left('smtp ' || concat_ws(' ', f.smtp_code, f.smtp_enhanced, f.detail), 200), p_now
      FROM finished f
      JOIN mailroom.contents c ON c.id = f.id
      WHERE f.outcome = 'failed' AND f.smtp_enhanced LIKE '5.1.%'
      ON CONFLICT (address_key, stream) DO NOTHING
    )
    SELECT b.n + (SELECT count(*) FROM kept),
           v_delivered_campaigns || b.delivered_campaigns, v_delivered_senders || b.delivered_senders,
           v_bounced_campaigns || b.bounced_campaigns, v_bounced_senders || b.bounced_senders
      INTO v_n, v_delivered_campaigns, v_delivered_senders, v_bounced_campaigns, v_bounced_senders
    FROM (SELECT count(*) AS n,
                 coalesce(array_agg(f.campaign_id) FILTER (WHERE f.sent OR f.bounced), '{}') AS delivered_campaigns,
                 coalesce(array_agg(f.sender) FILTER (WHERE f.sent OR f.bounced), '{}') AS delivered_senders,
                 coalesce(array_agg(f.campaign_id) FILTER (WHERE f.bounced), '{}') AS bounced_campaigns,
                 coalesce(array_agg(f.sender) FILTER (WHERE f.bounced), '{}') AS bounced_senders
          FROM (SELECT f.campaign_id, f.sender, f.outcome = 'sent' AS sent,
                       f.outcome = 'failed' AND f.smtp_enhanced LIKE '5.1.%' AS bounced
                FROM finished f) AS f) AS b;
    v_applied := v_applied + v_n;
  END LOOP;

  IF v_applied < v_total THEN
    -- Reports under a lost lease (the rows are locked since pass 2). They
    -- complete the ledger row that reclaim (expired) or release wrote; one
    -- already completed, and a token never seen, change nothing. A late
    -- 'sent' settles mail that waits (queued, review, paused) as sent: it
    -- leaves the queue and this row finishes it. Mail that finished failed
    -- by this very attempt's expiry (reclaim, attempts spent) becomes sent.
    WITH r AS (
      SELECT * FROM jsonb_to_recordset(p_results) AS r(id bigint, token uuid, outcome text, smtp_code integer,
                                                         smtp_enhanced text, detail text, provider_id text)
    ),
    settled AS (
      DELETE FROM mailroom.queue q
      USING r
      WHERE q.id = ANY (ARRAY[r.id]) AND r.outcome = 'sent' AND q.status IN ('queued', 'review', 'paused')
        AND EXISTS (SELECT FROM mailroom.attempts a
                    WHERE a.message_id = r.id AND a.lease_token = r.token AND a.reported IS NULL)
      RETURNING q.id, q.last_error
    )
    UPDATE mailroom.attempts a
    SET reported      = r.outcome,
        outcome       = 'stale',
        -- A late report keeps the time its lease ended.
        finished_at   = coalesce(a.finished_at, p_now),
        reported_at   = p_now,
        smtp_code     = r.smtp_code,
        smtp_enhanced = r.smtp_enhanced,
        smtp_text     = left(r.detail, 1000),
        provider_id   = left(r.provider_id, 255),
        duplicate     = r.outcome = 'sent' AND EXISTS (
                          SELECT FROM mailroom.attempts p
                          WHERE p.message_id = r.id AND p.reported = 'sent' AND p.id <> a.id),
        finished_as   = CASE WHEN s.id IS NOT NULL OR (r.outcome = 'sent' AND a.finished_as = 'failed') THEN 'sent'
                             ELSE a.finished_as END,
        status_reason = CASE WHEN s.id IS NOT NULL OR (r.outcome = 'sent' AND a.finished_as = 'failed') THEN 'late outcome'
                             ELSE a.status_reason END,
        last_error    = CASE WHEN s.id IS NOT NULL THEN s.last_error ELSE a.last_error END,
        -- (A settled mail's row becomes its finishing row.)
        finish_key    = CASE WHEN s.id IS NOT NULL THEN 0 ELSE a.finish_key END
    FROM r
    LEFT JOIN settled s ON s.id = r.id
    WHERE a.message_id = ANY (ARRAY[r.id]) AND a.lease_token = r.token AND a.reported IS NULL;
  END IF;

  -- The circuit breaker counts what finished now against its campaign and
  -- sender: delivered mail in this backend's own rows (no wait on other
  -- reporters); only a hard bounce locks a row, to evaluate, and last, so
  -- it is held only until this commits.
  IF cardinality(v_delivered_senders) > 0 THEN
    PERFORM mailroom._breaker_count_outcomes(v_delivered_campaigns, v_delivered_senders, v_bounced_campaigns,
                                             v_bounced_senders, p_now);
  END IF;

  RETURN v_applied;
END
$$;
ALTER FUNCTION mailroom._mark_outcomes(jsonb, timestamptz) OWNER TO mailroom_owner;
REVOKE ALL ON FUNCTION mailroom._mark_outcomes(jsonb, timestamptz) FROM PUBLIC;
COMMENT ON FUNCTION mailroom._mark_outcomes(jsonb, timestamptz) IS
  'Owner-only twin of mark_outcomes with a pinned clock (tests). Records a batch of outcomes: a final one deletes the queue row and writes the finishing ledger row, a retry or ambiguous outcome writes the attempt''s row and re-queues (or holds for review); a report under a lost lease completes the ledger row reclaim or release wrote (stale) and may settle waiting mail as sent. READ COMMITTED only.';

CREATE FUNCTION mailroom.mark_outcomes(p_results jsonb)
RETURNS integer
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = mailroom, pg_temp
AS $$
BEGIN
  -- plpgsql, not SQL: the call's plan is kept for the session (a SQL
  -- function's body is planned again on every call).
  RETURN mailroom._mark_outcomes(p_results, now());
END
$$;
ALTER FUNCTION mailroom.mark_outcomes(jsonb) OWNER TO mailroom_owner;
REVOKE ALL ON FUNCTION mailroom.mark_outcomes(jsonb) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION mailroom.mark_outcomes(jsonb) TO mailroom_runner;
COMMENT ON FUNCTION mailroom.mark_outcomes(jsonb) IS
  'Record a batch of outcomes [{id, token, outcome: sent|retry|failed|ambiguous, smtp_code, smtp_enhanced, detail, provider_id}] in one call; returns how many applied. Sent and failed (and a retry with the attempts spent) finish the mail; a retry re-queues it with backoff for the claim gate; a 5.1.x failure suppresses the address. A report under a lost lease changes nothing but the ledger (stale) or settles waiting mail as sent. A success reported twice for one mail is flagged duplicate. Runs only under READ COMMITTED (SQLSTATE 0A000 otherwise).';

CREATE FUNCTION mailroom._mark_outcome(
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
  RETURN mailroom._mark_outcomes(
    jsonb_build_array(jsonb_strip_nulls(jsonb_build_object(
      'id', p_id, 'token', p_token, 'outcome', p_outcome, 'detail', p_detail,
      'smtp_code', p_smtp_code, 'smtp_enhanced', p_smtp_enhanced, 'provider_id', p_provider_id))),
    p_now) = 1;
END
$$;
ALTER FUNCTION mailroom._mark_outcome(bigint, uuid, text, text, integer, text, text, timestamptz) OWNER TO mailroom_owner;
REVOKE ALL ON FUNCTION mailroom._mark_outcome(bigint, uuid, text, text, integer, text, text, timestamptz) FROM PUBLIC;
COMMENT ON FUNCTION mailroom._mark_outcome(bigint, uuid, text, text, integer, text, text, timestamptz) IS
  'Owner-only twin of mark_outcome with a pinned clock (tests).';

CREATE FUNCTION mailroom.mark_outcome(
  p_id            bigint,
  p_token         uuid,
  p_outcome       text,
  p_detail        text    DEFAULT NULL,
  p_smtp_code     integer DEFAULT NULL,
  p_smtp_enhanced text    DEFAULT NULL,
  p_provider_id   text    DEFAULT NULL
)
RETURNS boolean
LANGUAGE sql
SECURITY DEFINER
SET search_path = mailroom, pg_temp
AS $$
  SELECT mailroom._mark_outcome(p_id, p_token, p_outcome, p_detail, p_smtp_code, p_smtp_enhanced, p_provider_id, now())
$$;
ALTER FUNCTION mailroom.mark_outcome(bigint, uuid, text, text, integer, text, text) OWNER TO mailroom_owner;
REVOKE ALL ON FUNCTION mailroom.mark_outcome(bigint, uuid, text, text, integer, text, text) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION mailroom.mark_outcome(bigint, uuid, text, text, integer, text, text) TO mailroom_runner;
COMMENT ON FUNCTION mailroom.mark_outcome(bigint, uuid, text, text, integer, text, text) IS
  'Record one outcome; forwards to mark_outcomes. True when it applied, false when the lease token was stale.';

COMMIT;
