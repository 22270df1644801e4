-- Revert mailroom:campaign_control from pg
-- Back to v0.3.0: the functions with p_now on the messages table and the
-- v0.3 campaign_progress, which binds to the read-model view messages until
-- split_messages' revert (later in the revert) drops and re-creates it on the
-- restored table.

BEGIN;

DROP VIEW mailroom.campaign_progress;
DROP FUNCTION mailroom._campaign_eta(text, bigint, bigint, bigint, bigint, bigint, timestamptz, timestamptz);
DROP FUNCTION mailroom.finish_campaigns();
DROP FUNCTION mailroom.cancel_campaign(bigint);
DROP FUNCTION mailroom.resume_campaign(bigint);
DROP FUNCTION mailroom.pause_campaign(bigint);


CREATE OR REPLACE FUNCTION mailroom._campaign_lock(p_campaign bigint)
RETURNS text
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = mailroom, pg_temp
AS $$
DECLARE
  v_status text;
BEGIN
  SELECT status INTO v_status FROM mailroom.campaigns WHERE id = p_campaign FOR UPDATE;
  IF NOT FOUND THEN
    RAISE EXCEPTION 'mailroom: campaign: no campaign with id %', coalesce(p_campaign::text, 'NULL')
      USING ERRCODE = '22023';
  END IF;
  RETURN v_status;
END
$$;
ALTER FUNCTION mailroom._campaign_lock(bigint) OWNER TO mailroom_owner;
REVOKE ALL ON FUNCTION mailroom._campaign_lock(bigint) FROM PUBLIC;
COMMENT ON FUNCTION mailroom._campaign_lock(bigint) IS
  'Internal: lock a campaign row and return its status; raises 22023 when there is no such campaign.';

CREATE FUNCTION mailroom.pause_campaign(p_campaign bigint, p_now timestamptz DEFAULT now())
RETURNS integer
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = mailroom, pg_temp
AS $$
DECLARE
  v_status text := mailroom._campaign_lock(p_campaign);
  v_count  integer;
BEGIN
  IF v_status = 'paused' THEN
    RETURN 0;
  ELSIF v_status <> 'active' THEN
    RAISE EXCEPTION 'mailroom: campaign: % is %, only an active campaign can be paused', p_campaign, v_status
      USING ERRCODE = '55000';
  END IF;
  UPDATE mailroom.campaigns SET status = 'paused', updated_at = p_now WHERE id = p_campaign;
  -- Rows a runner is claiming right now are locked: this waits for that claim
  -- and then skips them (they are 'sending'); nothing else is handed out.
  UPDATE mailroom.messages SET status = 'paused', updated_at = p_now
  WHERE campaign_id = p_campaign AND status = 'queued';
  GET DIAGNOSTICS v_count = ROW_COUNT;
  RETURN v_count;
END
$$;
ALTER FUNCTION mailroom.pause_campaign(bigint, timestamptz) OWNER TO mailroom_owner;
REVOKE ALL ON FUNCTION mailroom.pause_campaign(bigint, timestamptz) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION mailroom.pause_campaign(bigint, timestamptz) TO mailroom_app, mailroom_operator;
COMMENT ON FUNCTION mailroom.pause_campaign(bigint, timestamptz) IS
  'Hold a campaign: its queued mail becomes paused (never claimed); mail being sent finishes. Returns how many were held; pausing a paused campaign does nothing.';

CREATE FUNCTION mailroom.resume_campaign(p_campaign bigint, p_now timestamptz DEFAULT now())
RETURNS integer
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = mailroom, pg_temp
AS $$
DECLARE
  v_status text := mailroom._campaign_lock(p_campaign);
  v_c      mailroom.campaigns%ROWTYPE;
  v_count  integer;
BEGIN
  IF v_status = 'active' THEN
    RETURN 0;
  ELSIF v_status <> 'paused' THEN
    RAISE EXCEPTION 'mailroom: campaign: % is %, only a paused campaign can be resumed', p_campaign, v_status
      USING ERRCODE = '55000';
  END IF;
  SELECT * INTO v_c FROM mailroom.campaigns WHERE id = p_campaign;
  UPDATE mailroom.campaigns SET status = 'active', updated_at = p_now WHERE id = p_campaign;
  -- Each message goes back once (same row, same delivery key): nobody twice.
  UPDATE mailroom.messages m
  SET status = 'queued',
      run_at = CASE WHEN v_c.window_start IS NULL THEN m.run_at
                    ELSE mailroom._window_open(coalesce(m.recipient_zone, v_c.time_zone), v_c.window_start,
                                               v_c.window_end, greatest(m.run_at, p_now)) END,
      updated_at = p_now
  WHERE m.campaign_id = p_campaign AND m.status = 'paused';
  GET DIAGNOSTICS v_count = ROW_COUNT;
  IF v_count > 0 THEN
    PERFORM pg_notify('mailroom', v_c.sender);
  END IF;
  RETURN v_count;
END
$$;
ALTER FUNCTION mailroom.resume_campaign(bigint, timestamptz) OWNER TO mailroom_owner;
REVOKE ALL ON FUNCTION mailroom.resume_campaign(bigint, timestamptz) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION mailroom.resume_campaign(bigint, timestamptz) TO mailroom_app, mailroom_operator;
COMMENT ON FUNCTION mailroom.resume_campaign(bigint, timestamptz) IS
  'Release a paused campaign: its paused mail is queued again (send window re-applied). Returns how many; resuming an active campaign does nothing.';

CREATE FUNCTION mailroom.cancel_campaign(p_campaign bigint, p_now timestamptz DEFAULT now())
RETURNS integer
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = mailroom, pg_temp
AS $$
DECLARE
  v_status text := mailroom._campaign_lock(p_campaign);
  v_count  integer;
BEGIN
  IF v_status = 'cancelled' THEN
    RETURN 0;
  ELSIF v_status = 'done' THEN
    RAISE EXCEPTION 'mailroom: campaign: % is done, nothing is left to cancel', p_campaign
      USING ERRCODE = '55000';
  END IF;
  UPDATE mailroom.campaigns SET status = 'cancelled', finished_at = p_now, updated_at = p_now WHERE id = p_campaign;
  UPDATE mailroom.messages
  SET status = 'cancelled', status_reason = 'campaign_cancelled', updated_at = p_now
  WHERE campaign_id = p_campaign AND status IN ('queued', 'paused');
  GET DIAGNOSTICS v_count = ROW_COUNT;
  RETURN v_count;
END
$$;
ALTER FUNCTION mailroom.cancel_campaign(bigint, timestamptz) OWNER TO mailroom_owner;
REVOKE ALL ON FUNCTION mailroom.cancel_campaign(bigint, timestamptz) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION mailroom.cancel_campaign(bigint, timestamptz) TO mailroom_app, mailroom_operator;
COMMENT ON FUNCTION mailroom.cancel_campaign(bigint, timestamptz) IS
  'Cancel a campaign: its queued and paused mail becomes cancelled (reason campaign_cancelled); mail being sent finishes. Returns how many were cancelled.';

CREATE FUNCTION mailroom.finish_campaigns(p_now timestamptz DEFAULT now())
RETURNS integer
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = mailroom, pg_temp
AS $$
DECLARE
  v_count integer;
BEGIN
  UPDATE mailroom.campaigns c
  SET status = 'done', finished_at = p_now, updated_at = p_now
  WHERE c.status = 'active'
    AND NOT EXISTS (SELECT FROM mailroom.messages m
                    WHERE m.campaign_id = c.id AND m.status IN ('queued', 'sending', 'paused'));
  GET DIAGNOSTICS v_count = ROW_COUNT;
  RETURN v_count;
END
$$;
ALTER FUNCTION mailroom.finish_campaigns(timestamptz) OWNER TO mailroom_owner;
REVOKE ALL ON FUNCTION mailroom.finish_campaigns(timestamptz) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION mailroom.finish_campaigns(timestamptz) TO mailroom_operator;
COMMENT ON FUNCTION mailroom.finish_campaigns(timestamptz) IS
  'Housekeeping (pg_cron job mailroom-materialize): mark active campaigns with nothing queued, sending or paused as done. Returns how many.';

CREATE VIEW mailroom.campaign_progress AS
SELECT c.id AS campaign_id,
       c.name,
       CASE WHEN c.status = 'active' AND s.queued + s.sending + s.paused = 0 THEN 'done' ELSE c.status END AS status,
       c.priority,
       c.send_at,
       s.total, s.queued, s.paused, s.sending, s.sent, s.failed, s.cancelled, s.review,
       s.sent_last_minute,
       round(s.sent_last_minute / 60.0, 2) AS send_rate_per_second,
       now() - s.oldest_due AS oldest_queued_age,
       CASE WHEN s.sent_last_minute > 0 AND c.status = 'active'
            THEN (s.queued + s.sending) * interval '60 seconds' / s.sent_last_minute END AS eta,
       c.created_at,
       c.finished_at
FROM mailroom.campaigns c
CROSS JOIN LATERAL (
  SELECT count(*) AS total,
         count(*) FILTER (WHERE m.status = 'queued') AS queued,
         count(*) FILTER (WHERE m.status = 'paused') AS paused,
         count(*) FILTER (WHERE m.status = 'sending') AS sending,
         count(*) FILTER (WHERE m.status = 'sent') AS sent,
         count(*) FILTER (WHERE m.status = 'failed') AS failed,
         count(*) FILTER (WHERE m.status = 'cancelled') AS cancelled,
         count(*) FILTER (WHERE m.status = 'review') AS review,
         count(*) FILTER (WHERE m.status = 'sent' AND m.sent_at > now() - interval '1 minute') AS sent_last_minute,
         min(m.run_at) FILTER (WHERE m.status = 'queued' AND m.run_at <= now()) AS oldest_due
  FROM mailroom.messages m
  WHERE m.campaign_id = c.id
) s;
ALTER VIEW mailroom.campaign_progress OWNER TO mailroom_owner;
GRANT SELECT ON mailroom.campaign_progress TO mailroom_operator, mailroom_app;
COMMENT ON VIEW mailroom.campaign_progress IS
  'Per campaign: counts per message status, mail sent in the last minute and the rate per second, age of the oldest due queued mail, ETA at the current rate; status done as soon as nothing is left to send.';

COMMIT;
