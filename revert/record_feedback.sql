-- Revert mailroom:record_feedback from pg: back to the v0.4.0 function,
-- which writes a bounced ledger row for every bounce event, also a repeat about the same mail under another event key.

-- The one entry point for what comes back after mail left, whoever heard it:
-- mailroom inbound (DSNs, ARF reports, mailto: unsubscribes), the provider
-- webhooks, or an application with its own inbound handling.
--
-- Idempotent per event: the event row is inserted ON CONFLICT (event_key) DO
-- NOTHING first, and everything else happens only when that insert took. A
-- second delivery of the same DSN or webhook - also one racing the first -
-- waits on the key's unique index until the first commits, then changes
-- nothing and returns false.
--
-- What each kind does:
--   bounce      a permanent failure: a bounced row on the mail's ledger (see
--               deploy/ledger_bounced.sql; the finishing row stays), the
--               address suppressed for all streams (reason hard_bounce);
--   complaint   the address suppressed (reason complaint) for the mail's
--               stream; for all streams when the mail is unknown (a spam
--               report about mail nobody can place: stop everything to the
--               address rather than risk the sender's reputation);
--   unsubscribe the address suppressed (reason unsubscribed) for the mail's
--               stream; when the mail is unknown (a provider's unsubscribe
--               event for pruned mail), for every stream that offers
--               unsubscribing (streams.unsubscribe_headers), which is what a
--               recipient can have left - not all streams, which would also
--               stop their password resets - and for all streams only when
--               no stream offers it;
--   delayed, delivered  recorded only.
-- Every kind counts against the mail's campaign and sender: the event row
-- carries both (copied from contents), which is what the rates read.
--
-- The address suppressed is the mail's own recipient when the mail is known
-- (a DSN's Final-Recipient may be a forwarding target mailroom never mails),
-- else the reported one. A mail that is still live (queued for a retry, say)
-- is stopped by claim_batch's gate like any suppressed address.

BEGIN;

CREATE OR REPLACE FUNCTION mailroom.record_feedback(
  p_kind       text,
  p_message_id bigint,
  p_address    text,
  p_status     text,
  p_detail     text,
  p_source     text,
  p_event_key  text
)
RETURNS boolean
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = mailroom, pg_temp
AS $$
DECLARE
  v_mail     record;
  v_address  text;
  v_event_id bigint;
  v_note     text;
BEGIN
  IF p_kind IS NULL OR p_kind NOT IN ('bounce', 'delayed', 'complaint', 'delivered', 'unsubscribe') THEN
    RAISE EXCEPTION 'mailroom: kind: must be bounce, delayed, complaint, delivered or unsubscribe, got %', coalesce(p_kind, 'NULL')
      USING ERRCODE = '22023';
  END IF;
  IF p_event_key IS NULL OR p_event_key = '' OR length(p_event_key) > 500 OR p_event_key ~ '[[:cntrl:]]' THEN
    RAISE EXCEPTION 'mailroom: event_key: required, at most 500 characters without control characters'
      USING ERRCODE = '22023', HINT = 'The event''s identity: an event recorded twice changes nothing the second time.';
  END IF;
  IF p_source IS NULL OR p_source !~ '^[a-z0-9][a-z0-9_.-]{0,49}$' THEN
    RAISE EXCEPTION 'mailroom: source: a lower-case name of at most 50 characters (dsn, arf, ses, app, …) is required, got %',
      coalesce(quote_literal(left(p_source, 60)), 'NULL') USING ERRCODE = '22023';
  END IF;
  IF p_status !~ '^[245]\.[0-9]{1,3}\.[0-9]{1,3}$' THEN
    RAISE EXCEPTION 'mailroom: status: must be an enhanced status code like 5.1.1 (RFC 3463), got %', quote_literal(left(p_status, 40))
      USING ERRCODE = '22023';
  END IF;
  IF p_kind = 'bounce' AND p_status !~ '^5' THEN
    RAISE EXCEPTION 'mailroom: status: a bounce is a permanent failure (5.x.x), got % (report a transient one as delayed)', p_status
      USING ERRCODE = '22023';
  END IF;
  IF length(p_detail) > 2000 THEN
    RAISE EXCEPTION 'mailroom: detail: at most 2000 characters, got %', length(p_detail) USING ERRCODE = '22023';
  END IF;
  IF p_address IS NOT NULL THEN
    PERFORM mailroom._check_address('address', p_address);
  END IF;
  IF p_message_id IS NULL AND p_address IS NULL THEN
    RAISE EXCEPTION 'mailroom: message_id: a message id or an address is required' USING ERRCODE = '22023';
  END IF;

  SELECT c.id, c.to_address, c.campaign_id, c.sender, c.stream INTO v_mail
  FROM mailroom.contents c WHERE c.id = p_message_id;
  IF p_message_id IS NOT NULL AND v_mail.id IS NULL AND p_address IS NULL THEN
    RAISE EXCEPTION 'mailroom: message_id: no mail % (pruned or never sent) and no address given', p_message_id
      USING ERRCODE = '22023';
  END IF;
  v_address := coalesce(v_mail.to_address, p_address);

  INSERT INTO mailroom.feedback_events AS e
    (event_key, kind, message_id, address, status, detail, source, campaign_id, sender, stream, received_at)
  VALUES (p_event_key, p_kind, v_mail.id, coalesce(p_address, v_mail.to_address), p_status, p_detail, p_source,
          v_mail.campaign_id, v_mail.sender, v_mail.stream, now())
  ON CONFLICT (event_key) DO NOTHING
  RETURNING e.id INTO v_event_id;
  IF v_event_id IS NULL THEN
    RETURN false;   -- recorded before: nothing changes twice
  END IF;

  v_note := concat_ws(' ', p_source, p_kind, p_status);
  CASE p_kind
    WHEN 'bounce' THEN
      IF v_mail.id IS NOT NULL THEN
        INSERT INTO mailroom.attempts (message_id, attempt, finished_at, outcome, smtp_enhanced, smtp_text, finish_key)
        SELECT v_mail.id,
               coalesce((SELECT max(a.attempt) FROM mailroom.attempts a WHERE a.message_id = v_mail.id),
                        (SELECT q.attempts FROM mailroom.queue q WHERE q.id = v_mail.id), 0),
               now(), 'bounced', p_status,
               left(regexp_replace(coalesce(p_detail, ''), '[[:cntrl:]]+', ' ', 'g'), 1000),
               nextval('mailroom.attempts_id_seq');
      END IF;
      PERFORM mailroom.suppress(v_address, 'hard_bounce', v_note, p_stream => NULL);
    WHEN 'complaint' THEN
      PERFORM mailroom.suppress(v_address, 'complaint', v_note, p_stream => v_mail.stream);
    WHEN 'unsubscribe' THEN
      IF v_mail.id IS NOT NULL THEN
        PERFORM mailroom.suppress(v_address, 'unsubscribed', v_note, p_stream => v_mail.stream);
      ELSE
        PERFORM mailroom.suppress(v_address, 'unsubscribed', v_note, p_stream => s.name)
        FROM mailroom.streams s WHERE s.unsubscribe_headers ORDER BY s.name;
        IF NOT FOUND THEN
          PERFORM mailroom.suppress(v_address, 'unsubscribed', v_note, p_stream => NULL);
        END IF;
      END IF;
    ELSE
      NULL;   -- delayed, delivered: recorded only
  END CASE;
  RETURN true;
END
$$;
ALTER FUNCTION mailroom.record_feedback(text, bigint, text, text, text, text, text) OWNER TO mailroom_owner;
REVOKE ALL ON FUNCTION mailroom.record_feedback(text, bigint, text, text, text, text, text) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION mailroom.record_feedback(text, bigint, text, text, text, text, text) TO mailroom_feedback;
COMMENT ON FUNCTION mailroom.record_feedback(text, bigint, text, text, text, text, text) IS
  'Record one piece of feedback about a mail (by message id, else by address): bounce (permanent, status 5.x.x: a bounced ledger row, the address suppressed for all streams, reason hard_bounce), complaint (suppressed for the mail''s stream; all streams when the mail is unknown), unsubscribe (suppressed for the mail''s stream; when the mail is unknown, for every stream with unsubscribe headers), delayed and delivered (recorded only). Returns true when recorded now, false when p_event_key was recorded before (then nothing changes). Bad input raises 22023 and writes nothing.';

COMMIT;
