-- Deploy mailroom:forget to pg
-- requires: split_messages
-- requires: cancel
-- requires: table_feedback_events
-- requires: table_inbound_unparsed
-- requires: table_cache
-- requires: table_schedules
-- requires: address_wire_form
-- requires: integrity_problems
-- requires: forgotten_addresses
-- requires: claim_batch
-- requires: enqueue
-- requires: enqueue_campaign
-- requires: cache_get_or_lock
-- requires: event_feed

-- Erasure (GDPR art. 17, CCPA deletion; issue 30, item 5). mailroom.forget
-- removes one person's address and what names them from every table that
-- holds it, and keeps only a keyed hash of the address so that the
-- suppression still holds: mailroom.forgotten_addresses, which
-- claim_batch's gate, enqueue and enqueue_campaign read like suppressions.
--
-- The hash is HMAC-SHA256 of the address key (lower case: a forgotten
-- person is forgotten in every spelling of the local part too) under a
-- random key made at deploy, mailroom.erasure_pepper. The pepper is not a
-- credential: it opens nothing and signs nothing; it only keeps a copy of
-- the table from being checked against a list of guessed addresses
-- (a plain hash of an address is reversed by hashing candidates). It is
-- owner-only and stays in the database; a dump that holds the hashes
-- holds the pepper too, so keep dumps as private as the database.
--
-- The tables and the hash are made by the change forgotten_addresses
-- (claim_batch's gate, enqueue and enqueue_campaign read them, and they
-- come before this change in the plan). Written with PostgreSQL's
-- own sha256() (the HMAC construction of RFC
-- 2104, with the key's inner and outer pads stored) rather than pgcrypto's
-- hmac(): the gate is inlined into the claim and so names every function
-- by schema, and pgcrypto's schema is the database's choice. The result is
-- the same bytes as hmac(key, msg, 'sha256') (tests/test_erasure.py checks
-- it against Python's hmac).

BEGIN;

-- Whether p_text names p_needle (case-insensitively; no pattern characters).
CREATE OR REPLACE FUNCTION mailroom._mentions(p_text text, p_needle text)
RETURNS boolean
LANGUAGE sql
IMMUTABLE STRICT PARALLEL SAFE
SET search_path = mailroom, pg_temp
AS $$ SELECT strpos(lower(p_text), lower(p_needle)) > 0 $$;
ALTER FUNCTION mailroom._mentions(text, text) OWNER TO mailroom_owner;
REVOKE ALL ON FUNCTION mailroom._mentions(text, text) FROM PUBLIC;
COMMENT ON FUNCTION mailroom._mentions(text, text) IS
  'Internal (forget): p_text contains p_needle, ignoring case.';

CREATE OR REPLACE FUNCTION mailroom.forget(p_address text)
RETURNS TABLE (part text, rows bigint)
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = mailroom, pg_temp
AS $$
#variable_conflict use_column
DECLARE
  v_key       text;
  v_wire      text;
  v_erased    constant text := 'erased@erased.invalid';
  v_ids       bigint[];
  v_live      bigint[];
  v_hash      bytea;
  v_new       bigint;
  v_cancelled bigint := 0;
  v_in_flight bigint;
  v_contents  bigint;
  v_attempts  bigint;
  v_queue     bigint;
  v_feedback  bigint;
  v_unparsed  bigint;
  v_cache     bigint;
  v_schedules bigint;
  v_suppr     bigint;
  v_events    bigint;
  v_feedback_ids bigint[];
BEGIN
  PERFORM mailroom._check_address('address', p_address);
  IF strpos(p_address, '@') = 0 THEN
    RAISE EXCEPTION 'mailroom: address: "%" has no @', p_address USING ERRCODE = '22023';
  END IF;
  v_key := mailroom._address_key(p_address);
  v_wire := lower(v_key);
  v_hash := mailroom._forgotten_hash(v_key);

  -- The hash first: from this commit on, mail written meanwhile (a
  -- transaction this snapshot cannot see) is refused by the gate.
  INSERT INTO mailroom.forgotten_addresses (key_hash) VALUES (v_hash) ON CONFLICT DO NOTHING;
  GET DIAGNOSTICS v_new = ROW_COUNT;
  -- The erased content's own address is "forgotten" too: mail that was
  -- being sent and comes back to the queue (a retry, a reclaim) is
  -- cancelled by the gate instead of being sent to the placeholder.
  INSERT INTO mailroom.forgotten_addresses (key_hash) VALUES (mailroom._forgotten_hash(v_erased)) ON CONFLICT DO NOTHING;

  -- The person's mail, in every spelling of the local part's case
  -- (contents_recipient_idx), and the mail that was being sent when they
  -- were forgotten before (its outcome has come in since, perhaps).
  SELECT coalesce(array_agg(c.id ORDER BY c.id), '{}') INTO v_ids
  FROM mailroom.contents c
  WHERE lower(c.to_address) = v_wire;
  SELECT v_ids || f.in_flight INTO v_ids FROM mailroom.forgotten_addresses f WHERE f.key_hash = v_hash;

  -- Live mail is cancelled, reason erased (campaign mail not queued yet
  -- too, off its backlog's count): the ledger counts it like any cancel.
  -- Mail being sent is in a runner's hands and cannot be called back: its
  -- content is erased below and it is reported as in_flight (forget again
  -- once its outcome is in, to erase the relay's answer too).
  SELECT coalesce(array_agg(i.id), '{}') INTO v_live
  FROM unnest(v_ids) AS i(id)
  WHERE NOT EXISTS (SELECT FROM mailroom.attempts f WHERE f.message_id = i.id AND f.finished_as IS NOT NULL);
  IF cardinality(v_live) > 0 THEN
    SELECT count(*) INTO v_cancelled
    FROM mailroom.cancel(v_live, 'erased') AS r
    WHERE r.status = 'cancelled' AND r.previous_status IS DISTINCT FROM 'cancelled';
  END IF;
  UPDATE mailroom.forgotten_addresses f
  SET in_flight = ARRAY(SELECT q.id FROM mailroom.queue q WHERE q.id = ANY (v_ids) AND q.status = 'sending' ORDER BY q.id)
  WHERE f.key_hash = v_hash
  RETURNING cardinality(f.in_flight) INTO v_in_flight;

  -- Contents: the address, what renders it (bodies, subject, template
  -- variables, headers) and any key or id that spells it. The row stays, so
  -- the ledger, the campaign's counts and integrity_problems stay whole.
  UPDATE mailroom.contents c
  SET to_address    = v_erased,
      subject       = CASE WHEN c.template_key IS NULL THEN '' END,
      body_text     = CASE WHEN c.template_key IS NULL THEN '' END,
      body_html     = NULL,
      template_vars = '{}',
      headers       = '{}',
      recipient_zone = NULL,
      delivery_key  = CASE WHEN mailroom._mentions(c.delivery_key, v_wire) THEN 'mailroom:erased:' || c.id
                           ELSE c.delivery_key END,
      recipient_id  = CASE WHEN mailroom._mentions(c.recipient_id, v_wire) THEN 'erased:' || c.id
                           ELSE c.recipient_id END
  WHERE c.id = ANY (v_ids) AND c.to_address <> v_erased;
  GET DIAGNOSTICS v_contents = ROW_COUNT;

  -- The ledger: its rows and outcomes stay (they are the counts); the
  -- relay's answers and errors, which may quote the address, go.
  UPDATE mailroom.attempts a
  SET smtp_text = NULL,
      last_error = NULL,
      status_reason = CASE WHEN mailroom._mentions(a.status_reason, v_wire) THEN 'erased' ELSE a.status_reason END
  WHERE a.message_id = ANY (v_ids)
    AND (a.smtp_text IS NOT NULL OR a.last_error IS NOT NULL OR mailroom._mentions(a.status_reason, v_wire));
  GET DIAGNOSTICS v_attempts = ROW_COUNT;
  UPDATE mailroom.queue q SET last_error = NULL WHERE q.id = ANY (v_ids) AND q.last_error IS NOT NULL;
  GET DIAGNOSTICS v_queue = ROW_COUNT;
  v_attempts := v_attempts + v_queue;

  -- Feedback: the events stay (the rates and the breaker count them, and
  -- their event keys keep a repeated report from counting twice); the
  -- address and the reporter's detail go.
  WITH erased AS (
    UPDATE mailroom.feedback_events f
    SET address  = CASE WHEN f.message_id IS NULL THEN v_erased END,
        detail   = NULL,
        event_key = CASE WHEN mailroom._mentions(f.event_key, v_wire) THEN 'mailroom:erased:' || f.id
                         ELSE f.event_key END
    WHERE f.message_id = ANY (v_ids) OR lower(f.address) = v_wire
       OR mailroom._mentions(f.detail, v_wire) OR mailroom._mentions(f.event_key, v_wire)
    RETURNING f.message_id
  )
  -- A complaint about other mail that quotes the address: its feed event
  -- (the complaint's detail) is found by that mail's id below.
  SELECT count(*), coalesce(array_agg(DISTINCT e.message_id) FILTER (WHERE e.message_id IS NOT NULL), '{}')
  INTO v_feedback, v_feedback_ids
  FROM erased e;

  -- Unparsed inbound mail is raw mail: removed whole where it names the
  -- address (envelope or text; the bytes compared in their escaped form,
  -- where ASCII stays itself).
  DELETE FROM mailroom.inbound_unparsed u
  WHERE mailroom._mentions(u.envelope_from, v_wire) OR mailroom._mentions(u.envelope_to, v_wire)
     OR mailroom._mentions(encode(u.raw, 'escape'), v_wire)
     OR position(convert_to(p_address, 'UTF8') IN u.raw) > 0;
  GET DIAGNOSTICS v_unparsed = ROW_COUNT;

  -- The applications' cache, where a key or value names the address.
  DELETE FROM mailroom.cache k
  WHERE mailroom._mentions(k.key, v_wire) OR mailroom._mentions(k.value::text, v_wire);
  GET DIAGNOSTICS v_cache = ROW_COUNT;
  DELETE FROM mailroom.cache_loads l WHERE mailroom._mentions(l.key, v_wire);

  -- The person's schedules: made inactive and emptied (their mail names
  -- them by id, so the rows stay).
  UPDATE mailroom.schedules s
  SET to_address = v_erased,
      vars = '{}',
      active = false,
      next_run_at = NULL,
      schedule_key = CASE WHEN mailroom._mentions(s.schedule_key, v_wire) THEN 'mailroom:erased:' || s.id
                          ELSE s.schedule_key END,
      recipient_id = CASE WHEN mailroom._mentions(s.recipient_id, v_wire) THEN 'erased:' || s.id
                          ELSE s.recipient_id END,
      updated_at = now()
  WHERE lower(s.to_address) = v_wire;
  GET DIAGNOSTICS v_schedules = ROW_COUNT;

  -- The suppressions: replaced by the hash above (all streams).
  DELETE FROM mailroom.suppressions s WHERE lower(s.address_key) = v_wire;
  GET DIAGNOSTICS v_suppr = ROW_COUNT;

  -- The event feed: the events stay (an application may not have read
  -- them yet); the address and any relay's answer or reporter's detail go.
  -- Last, so that the events this forget itself wrote (the cancels, the
  -- hash's own suppressions) are covered too.
  -- By key (events_message_idx, events_address_idx), never by reading the
  -- feed: a ledger event's detail is its own mail's relay answer, a
  -- complaint's is its feedback row's (matched above, quoting the address
  -- or not), a suppression's names its own address.
  UPDATE mailroom.events e
  SET address = CASE WHEN e.address IS NOT NULL THEN v_erased END,
      detail  = NULL
  WHERE (e.message_id = ANY (v_ids || v_feedback_ids) OR lower(e.address) = v_wire)
    AND (e.detail IS NOT NULL OR e.address <> v_erased);
  GET DIAGNOSTICS v_events = ROW_COUNT;

  RETURN QUERY VALUES
    ('forgotten_addresses', v_new),
    ('cancelled', v_cancelled),
    ('in_flight', v_in_flight),
    ('contents', v_contents),
    ('attempts', v_attempts),
    ('feedback_events', v_feedback),
    ('inbound_unparsed', v_unparsed),
    ('cache', v_cache),
    ('schedules', v_schedules),
    ('suppressions', v_suppr),
    ('events', v_events);
END
$$;
ALTER FUNCTION mailroom.forget(text) OWNER TO mailroom_owner;
REVOKE ALL ON FUNCTION mailroom.forget(text) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION mailroom.forget(text) TO mailroom_operator;
COMMENT ON FUNCTION mailroom.forget(text) IS
  'Operator (erasure, GDPR/CCPA): remove an address and what names it from contents (address, bodies, subject, vars, headers), the ledger''s texts, feedback events, unparsed inbound mail, the cache, schedules and suppressions; cancel its live mail (reason erased); keep only an HMAC of the address in forgotten_addresses, which refuses new mail to it on every stream. Idempotent. One row per part: rows changed or removed (forgotten_addresses 0 = was forgotten already; in_flight = mail being sent, not stoppable).';

-- For the console and status: how many addresses are forgotten, and whether one is.
CREATE OR REPLACE FUNCTION mailroom.is_forgotten(p_address text)
RETURNS boolean
LANGUAGE sql
STABLE STRICT
SECURITY DEFINER
SET search_path = mailroom, pg_temp
AS $$
  SELECT EXISTS (SELECT FROM mailroom.forgotten_addresses f
                 WHERE f.key_hash = mailroom._forgotten_hash(mailroom._address_key(p_address)))
$$;
ALTER FUNCTION mailroom.is_forgotten(text) OWNER TO mailroom_owner;
REVOKE ALL ON FUNCTION mailroom.is_forgotten(text) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION mailroom.is_forgotten(text) TO mailroom_operator;
COMMENT ON FUNCTION mailroom.is_forgotten(text) IS
  'Operator: whether mailroom.forget erased this address (its hash is in forgotten_addresses).';

COMMIT;
