-- Revert mailroom:message_guard from pg
-- Recreates the v0.3 trigger function only. The trigger itself belongs on the
-- messages table, which split_messages' revert (later in the revert)
-- restores together with both guard triggers; no trigger is ever created on
-- the read-model view mailroom.messages.

BEGIN;

CREATE FUNCTION mailroom._message_guard()
RETURNS trigger
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = mailroom, pg_temp
AS $$
DECLARE
  v_status text;
  v_zone   text;
  v_start  time;
  v_end    time;
  v_active boolean;
BEGIN
  IF NEW.campaign_id IS NOT NULL THEN
    SELECT c.status, coalesce(NEW.recipient_zone, c.time_zone), c.window_start, c.window_end
    INTO v_status, v_zone, v_start, v_end
    FROM mailroom.campaigns c WHERE c.id = NEW.campaign_id;
    IF v_status = 'paused' THEN
      NEW.status := 'paused';
    ELSIF v_status = 'cancelled' THEN
      NEW.status := 'cancelled';
      NEW.status_reason := 'campaign_cancelled';
      RETURN NEW;
    END IF;
  ELSE
    SELECT s.active, s.time_zone, s.window_start, s.window_end
    INTO v_active, v_zone, v_start, v_end
    FROM mailroom.schedules s WHERE s.id = NEW.schedule_id;
    IF NOT v_active THEN
      NEW.status := 'cancelled';
      NEW.status_reason := 'schedule_inactive';
      RETURN NEW;
    END IF;
  END IF;
  IF v_start IS NOT NULL THEN
    NEW.run_at := mailroom._window_open(v_zone, v_start, v_end, NEW.run_at);
  END IF;
  RETURN NEW;
END
$$;
ALTER FUNCTION mailroom._message_guard() OWNER TO mailroom_owner;
REVOKE ALL ON FUNCTION mailroom._message_guard() FROM PUBLIC;
COMMENT ON FUNCTION mailroom._message_guard() IS
  'Internal trigger: campaign or schedule mail going back from sending to queued is held (paused campaign), cancelled (cancelled campaign, inactive schedule) or moved to its send window''s next opening.';

COMMIT;
