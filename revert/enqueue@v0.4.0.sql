-- Revert mailroom:enqueue from pg (back to the v0.3.0 function)
-- requires: enqueue@v0.2.0
-- requires: runner_waiting

-- PostgreSQL serializes notifying commits: a transaction that called NOTIFY
-- holds a database-wide lock from its pre-commit through its WAL flush, so
-- enqueues that all notify cannot share a flush (bench/single_enqueue.py:
-- a bare INSERT reached 13,870/s with synchronous_commit on, the same INSERT
-- with pg_notify 7,484/s). A runner that is busy claims again as soon as it
-- has room and needs no wake-up; only a runner that waits for work does. So
-- enqueue notifies only while some runner holds the waiting lock.
--
-- No wake-up is lost: enqueue takes the barrier lock (shared, to its commit)
-- before it looks for a waiting runner, and a runner that starts waiting
-- takes the waiting lock first and then claims once more only after the
-- barrier was free (enqueues_settled): an enqueue that saw nobody waiting has
-- committed by then, and that claim finds its mail.

BEGIN;

DROP FUNCTION mailroom.enqueue(text, text, text, text, jsonb, text, timestamptz, integer, text, integer, text, jsonb, text, text);

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
  p_now          timestamptz DEFAULT now()
)
RETURNS bigint
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = mailroom, pg_temp
AS $$
DECLARE
  v_id     bigint;
  v_run_at timestamptz := coalesce(p_send_at, p_now);
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
  IF p_subject IS NOT NULL THEN
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

  -- Suppressed addresses are recorded, not refused: the application's
  -- transaction goes on and the decision stays auditable.
  IF EXISTS (SELECT FROM mailroom.suppressions WHERE address_key = mailroom._address_key(p_to)) THEN
    v_status := 'cancelled';
    v_reason := 'suppressed';
  END IF;

  INSERT INTO mailroom.messages (
    delivery_key, status, status_reason, priority, run_at, sender, to_address,
    subject, body_text, body_html, template_key, template_vars, headers,
    max_attempts, on_ambiguous, created_at, updated_at)
  VALUES (
    coalesce(p_delivery_key, 'mailroom:' || gen_random_uuid()), v_status, v_reason, p_priority,
    v_run_at, p_sender, p_to, p_subject, p_body_text, p_body_html, p_template, p_vars, p_headers,
    p_max_attempts, p_on_ambiguous, p_now, p_now)
  ON CONFLICT (delivery_key) DO NOTHING
  RETURNING id INTO v_id;

  IF v_id IS NULL THEN
    -- The key exists, or a concurrent transaction just committed it (the
    -- insert waited for it). Under READ COMMITTED this statement sees it.
    SELECT id INTO v_id FROM mailroom.messages WHERE delivery_key = p_delivery_key;
    IF v_id IS NULL THEN
      RAISE EXCEPTION 'mailroom: delivery_key: "%" was enqueued by a concurrent transaction this snapshot cannot see', p_delivery_key
        USING ERRCODE = '40001', HINT = 'Retry the transaction.';
    END IF;
    RETURN v_id;
  END IF;

  -- Wakes runners when the caller's transaction commits, if one waits for
  -- work (it holds the waiting lock, see runner_waiting); busy runners claim
  -- again without a wake-up. The barrier lock, held to commit, lets a runner
  -- that starts waiting after this check see this mail before it sleeps.
  IF v_status = 'queued' AND v_run_at <= p_now THEN
    PERFORM pg_advisory_xact_lock_shared(1835100525, 3);
    IF pg_try_advisory_lock(1835100525, 2) THEN
      PERFORM pg_advisory_unlock(1835100525, 2);
    ELSE
      PERFORM pg_notify('mailroom', p_sender);
    END IF;
  END IF;
  RETURN v_id;
END
$$;
ALTER FUNCTION mailroom.enqueue(text, text, text, text, jsonb, text, timestamptz, integer, text, integer, text, jsonb, text, timestamptz)
  OWNER TO mailroom_owner;
REVOKE ALL ON FUNCTION mailroom.enqueue(text, text, text, text, jsonb, text, timestamptz, integer, text, integer, text, jsonb, text, timestamptz)
  FROM PUBLIC;
GRANT EXECUTE ON FUNCTION mailroom.enqueue(text, text, text, text, jsonb, text, timestamptz, integer, text, integer, text, jsonb, text, timestamptz)
  TO mailroom_app;
COMMENT ON FUNCTION mailroom.enqueue(text, text, text, text, jsonb, text, timestamptz, integer, text, integer, text, jsonb, text, timestamptz) IS
  'Queue one mail inside the caller''s transaction and return its id. Idempotent on p_delivery_key: a repeat returns the first id and changes nothing. Give literal subject/body or p_template with p_vars.';

COMMIT;
