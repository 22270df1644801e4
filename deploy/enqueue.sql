-- Deploy mailroom:enqueue to pg (rework after v0.4.0)
-- requires: enqueue@v0.4.0
-- requires: runner_waiting

-- v0.4: the content goes into mailroom.contents once and the live row into
-- the narrow mailroom.queue (same id), in one statement. Suppressed
-- addresses are still recorded as cancelled here, as a shortcut: the check
-- that counts is claim_batch's gate, which also catches a suppression made
-- after this call. The clock is the database's: no p_now parameter on a
-- function an application may execute.
--
-- Wake-ups (see runner_waiting): enqueue notifies when a runner waits for
-- work (a row in mailroom.runner_waits) and, so that no wake-up is lost,
-- holds the barrier until its transaction ends. Issue 32, item 4: the
-- barrier was an advisory lock, which any login with CONNECT could hold; it
-- is now a ROW EXCLUSIVE lock on mailroom.enqueue_barrier, which only
-- mailroom's functions can take. enqueue takes it unconditionally (the only
-- conflicting holder is enqueues_settled, for the one statement of a
-- runner's autocommit call, so no session can make enqueue wait longer),
-- and only then looks for waiting runners, in a statement of its own: its
-- snapshot is taken after the lock, so a runner whose enqueues_settled came
-- first is seen. (v0.4.0 tried the lock and read runner_waits in one
-- expression, under a snapshot from before the try.) Under REPEATABLE READ
-- or SERIALIZABLE the caller's snapshot may predate a runner that started
-- waiting: enqueue notifies.

BEGIN;

CREATE OR REPLACE FUNCTION mailroom.enqueue(
  p_to           text,
  p_subject      text        DEFAULT NULL,
  p_body_text    text        DEFAULT NULL,
  p_body_html    text        DEFAULT NULL,
  p_headers      jsonb       DEFAULT '{}',
  p_delivery_key text        DEFAULT NULL,
  p_send_at      timestamptz DEFAULT NULL,
  p_priority     integer     DEFAULT 0,
  p_sender       text        DEFAULT 'default',
  p_max_attempts integer     DEFAULT 5,
  p_template     text        DEFAULT NULL,
  p_vars         jsonb       DEFAULT '{}',
  p_on_ambiguous text        DEFAULT 'retry',
  p_stream       text        DEFAULT 'transactional'
)
RETURNS bigint
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = mailroom, pg_temp
AS $$
DECLARE
  v_id     bigint;
  v_now    timestamptz := now();
  v_run_at timestamptz := coalesce(p_send_at, v_now);
  v_status text := 'queued';
  v_reason text;
  v_max    bigint;
BEGIN
  -- Everything is checked before anything is written. Each check is an
  -- inline expression; only when it fails is the validation helper called,
  -- to raise its exact message. (v0.1.0 called the helpers every time: eight
  -- nested plpgsql/SQL calls, each with its own SET search_path, and
  -- _check_body read the setting through an SQL function twice - together
  -- more than the INSERT itself; bench/single_enqueue.py.)
  IF NOT coalesce(mailroom._address_ok(p_to), false) THEN
    PERFORM mailroom._check_address('to', p_to);
  END IF;
  IF p_template IS NULL THEN
    IF p_subject IS NULL THEN
      RAISE EXCEPTION 'mailroom: subject: required unless a template is given' USING ERRCODE = '22023';
    END IF;
    IF p_body_text IS NULL AND p_body_html IS NULL THEN
      RAISE EXCEPTION 'mailroom: body_text: a text or HTML body is required unless a template is given'
        USING ERRCODE = '22023';
    END IF;
  ELSE
    IF p_subject IS NOT NULL OR p_body_text IS NOT NULL OR p_body_html IS NOT NULL THEN
      RAISE EXCEPTION 'mailroom: template: give either a template or subject and body, not both'
        USING ERRCODE = '22023';
    END IF;
    IF NOT EXISTS (SELECT FROM mailroom.templates WHERE key = p_template) THEN
      RAISE EXCEPTION 'mailroom: template: no template named "%"', p_template
        USING ERRCODE = '22023', HINT = 'Create it with mailroom.upsert_template().';
    END IF;
  END IF;
  -- The union of _check_header_text's tests (CR, LF, control characters
  -- other than TAB, U+2028/U+2029, over 64 KiB) inline: the helper, a
  -- plpgsql call with its own search_path, cost about 20 us a mail when
  -- called every time; now only a failing subject reaches it, for its message.
  IF p_subject ~ '[\x01-\x08\x0A-\x1F\x7F\u0080-\u009F\u2028\u2029]' OR octet_length(p_subject) > 65536 THEN
    PERFORM mailroom._check_header_text('subject', p_subject);
  END IF;
  IF p_body_text IS NOT NULL OR p_body_html IS NOT NULL THEN
    SELECT s.value::bigint INTO v_max FROM mailroom.settings s WHERE s.key = 'max_body_bytes';
    IF octet_length(p_body_text) > v_max OR octet_length(p_body_html) > v_max THEN
      PERFORM mailroom._check_body('body_text', p_body_text);
      PERFORM mailroom._check_body('body_html', p_body_html);
    END IF;
  END IF;
  IF p_headers IS DISTINCT FROM '{}'::jsonb THEN
    PERFORM mailroom._check_headers(p_headers);
  END IF;
  IF p_vars IS NULL OR jsonb_typeof(p_vars) <> 'object' THEN
    RAISE EXCEPTION 'mailroom: vars: must be a JSON object' USING ERRCODE = '22023';
  END IF;
  IF p_delivery_key IS NOT NULL AND (p_delivery_key = '' OR length(p_delivery_key) > 255
                                     OR p_delivery_key ~ '[[:cntrl:]]') THEN
    RAISE EXCEPTION 'mailroom: delivery_key: must be 1 to 255 characters without control characters'
      USING ERRCODE = '22023';
  END IF;
  IF p_sender IS NULL OR p_sender !~ '^[A-Za-z0-9][A-Za-z0-9_.:-]{0,63}$' THEN
    RAISE EXCEPTION 'mailroom: sender: "%" is not a sender name (letters, digits and _ . : -, at most 64)', p_sender
      USING ERRCODE = '22023';
  END IF;
  IF p_priority IS NULL OR p_priority NOT BETWEEN -100 AND 100 THEN
    PERFORM mailroom._check_range('priority', p_priority, -100, 100);
  END IF;
  IF p_max_attempts IS NULL OR p_max_attempts NOT BETWEEN 1 AND 100 THEN
    PERFORM mailroom._check_range('max_attempts', p_max_attempts, 1, 100);
  END IF;
  IF p_on_ambiguous IS NULL OR p_on_ambiguous NOT IN ('retry', 'review') THEN
    RAISE EXCEPTION 'mailroom: on_ambiguous: must be retry or review, got %', coalesce(p_on_ambiguous, 'NULL')
      USING ERRCODE = '22023';
  END IF;

  IF p_stream IS DISTINCT FROM 'transactional' THEN
    PERFORM mailroom._check_stream(p_stream);
  END IF;

  -- Suppressed addresses (for all streams or for this one) are recorded,
  -- not refused: the application's transaction goes on and the decision
  -- stays auditable.
  -- A forgotten address (mailroom.forget) is suppressed for every stream;
  -- its hash is worked out only when some address is forgotten at all.
  IF EXISTS (SELECT FROM mailroom.suppressions s
             WHERE s.address_key = mailroom._address_key(p_to) AND (s.stream IS NULL OR s.stream = p_stream))
     OR (EXISTS (SELECT FROM mailroom.forgotten_addresses)
         AND EXISTS (SELECT FROM mailroom.forgotten_addresses f
                     WHERE f.key_hash = mailroom._forgotten_hash(mailroom._address_key(p_to)))) THEN
    v_status := 'cancelled';
    v_reason := 'suppressed';
  END IF;

  WITH content AS (
    INSERT INTO mailroom.contents (
      delivery_key, sender, to_address, subject, body_text, body_html, template_key, template_vars,
      headers, priority, max_attempts, on_ambiguous, stream, created_at)
    VALUES (
      coalesce(p_delivery_key, 'mailroom:' || gen_random_uuid()), p_sender, p_to, p_subject, p_body_text,
      p_body_html, p_template, p_vars, p_headers, p_priority, p_max_attempts, p_on_ambiguous, p_stream, v_now)
    ON CONFLICT (delivery_key) DO NOTHING
    RETURNING id
  ),
  live AS (
    INSERT INTO mailroom.queue (id, priority, run_at, sender, max_attempts, on_ambiguous, updated_at)
    SELECT content.id, p_priority, v_run_at, p_sender, p_max_attempts, p_on_ambiguous, v_now
    FROM content
    WHERE v_status = 'queued'
  ),
  finished AS (
    INSERT INTO mailroom.attempts (message_id, attempt, finished_at, outcome, finished_as, status_reason)
    SELECT content.id, 0, v_now, 'cancelled', 'cancelled', v_reason
    FROM content
    WHERE v_status = 'cancelled'
  )
  SELECT content.id INTO v_id FROM content;

  IF v_id IS NULL THEN
    -- The key exists, or a concurrent transaction just committed it (the
    -- insert waited for it). Under READ COMMITTED this statement sees it.
    SELECT c.id INTO v_id FROM mailroom.contents c WHERE c.delivery_key = p_delivery_key;
    IF v_id IS NULL THEN
      RAISE EXCEPTION 'mailroom: delivery_key: "%" was enqueued by a concurrent transaction this snapshot cannot see', p_delivery_key
        USING ERRCODE = '40001', HINT = 'Retry the transaction.';
    END IF;
    -- Idempotence is the point of the key, but a receipt not queued because
    -- its key collided with another mail's is easy to miss: say so, on the
    -- repeat path only (a NOTICE costs the new-mail path nothing, and keeps
    -- enqueue's one signature). SQLSTATE 01MR1 lets a client tell it apart.
    RAISE NOTICE 'mailroom: delivery_key: "%" already exists (message %): nothing new was queued', p_delivery_key, v_id
      USING ERRCODE = '01MR1',
            HINT = 'A repeat of the same mail is fine; a different mail needs a key of its own.';
    RETURN v_id;
  END IF;

  -- Wakes waiting runners when the caller's transaction commits; busy
  -- runners claim again without a wake-up (see the header).
  IF v_status = 'queued' AND v_run_at <= v_now THEN
    LOCK TABLE mailroom.enqueue_barrier IN ROW EXCLUSIVE MODE;
    IF current_setting('transaction_isolation') <> 'read committed'
       OR EXISTS (SELECT FROM mailroom.runner_waits) THEN
      PERFORM pg_notify('mailroom', p_sender);
    END IF;
  END IF;
  RETURN v_id;
END
$$;
ALTER FUNCTION mailroom.enqueue(text, text, text, text, jsonb, text, timestamptz, integer, text, integer, text, jsonb, text, text)
  OWNER TO mailroom_owner;
REVOKE ALL ON FUNCTION mailroom.enqueue(text, text, text, text, jsonb, text, timestamptz, integer, text, integer, text, jsonb, text, text)
  FROM PUBLIC;
GRANT EXECUTE ON FUNCTION mailroom.enqueue(text, text, text, text, jsonb, text, timestamptz, integer, text, integer, text, jsonb, text, text)
  TO mailroom_app;
COMMENT ON FUNCTION mailroom.enqueue(text, text, text, text, jsonb, text, timestamptz, integer, text, integer, text, jsonb, text, text) IS
  'Queue one mail inside the caller''s transaction and return its id. Idempotent on p_delivery_key: a repeat returns the first id, changes nothing and raises NOTICE (SQLSTATE 01MR1) saying the key already existed. Give literal subject/body or p_template with p_vars. p_stream (default transactional) names its stream (mailroom.streams).';

COMMIT;
