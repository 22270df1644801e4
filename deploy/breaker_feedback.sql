-- Deploy mailroom:breaker_feedback to pg
-- requires: table_feedback_events
-- requires: circuit_breaker

-- Bounces and complaints reported after the mail left (mailroom inbound, the
-- provider webhooks, applications: all through record_feedback) count
-- against the mail's campaign and sender in the transaction that records
-- them. A trigger on the event table, not a call inside record_feedback: an
-- event row is inserted once per event_key (a replay inserts nothing, so it
-- counts nothing), and every way an event is recorded is counted alike.
-- The mail was counted delivered when it was sent, so only the bad event
-- counts now; delayed, delivered and unsubscribe events do not count.
--
-- Each mail counts once per kind, whatever its event keys: a bounce or a
-- complaint about a mail that has an earlier event of that kind counts
-- nothing, nor does a bounce of a mail whose SMTP answer (a 5.1.x failure,
-- which mark_outcomes counted) or an earlier report already bounced it in
-- the ledger. record_feedback locks the mail's contents row before it
-- inserts the event, so two reports about one mail racing each other are
-- counted in turn and the second sees the first.

BEGIN;

CREATE OR REPLACE FUNCTION mailroom._breaker_feedback_event()
RETURNS trigger
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = mailroom, pg_temp
AS $$
BEGIN
  IF NEW.message_id IS NULL THEN
    RETURN NULL;   -- mail nobody can place has no campaign or sender to count against
  END IF;
  IF EXISTS (SELECT FROM mailroom.feedback_events e
             WHERE e.message_id = NEW.message_id AND e.kind = NEW.kind AND e.id <> NEW.id) THEN
    RETURN NULL;   -- this mail's bounce (or complaint) was counted when it was first reported
  END IF;
  IF NEW.kind = 'bounce' AND EXISTS (
       SELECT FROM mailroom.attempts a
       WHERE a.message_id = NEW.message_id
         AND (a.outcome = 'bounced' OR (a.finished_as = 'failed' AND a.outcome = 'failed' AND a.smtp_enhanced LIKE '5.1.%'))) THEN
    RETURN NULL;   -- counted already: by mark_outcomes from the SMTP answer, or by an earlier report
  END IF;
  -- Campaign before sender, as mark_outcomes locks them: no deadlock.
  PERFORM mailroom._breaker_tally(x.scope, x.key, 0, (NEW.kind = 'bounce')::integer,
                                  (NEW.kind = 'complaint')::integer, NEW.received_at)
  FROM (VALUES ('campaign', NEW.campaign_id::text), ('sender', NEW.sender)) AS x(scope, key)
  WHERE x.key IS NOT NULL
  ORDER BY x.scope, x.key;
  RETURN NULL;
END
$$;
ALTER FUNCTION mailroom._breaker_feedback_event() OWNER TO mailroom_owner;
REVOKE ALL ON FUNCTION mailroom._breaker_feedback_event() FROM PUBLIC;
COMMENT ON FUNCTION mailroom._breaker_feedback_event() IS
  'Trigger (feedback_events, after insert of a bounce or complaint): count it against the mail''s campaign and sender, once per mail and kind (a repeat under another event key, or a bounce of mail already bounced, counts nothing); the circuit breaker may pause either.';

CREATE OR REPLACE TRIGGER feedback_events_breaker
  AFTER INSERT ON mailroom.feedback_events
  FOR EACH ROW WHEN (NEW.kind IN ('bounce', 'complaint'))
  EXECUTE FUNCTION mailroom._breaker_feedback_event();
COMMENT ON TRIGGER feedback_events_breaker ON mailroom.feedback_events IS
  'The circuit breaker counts each new bounce and complaint (a replayed event inserts no row and counts nothing).';

COMMIT;
