-- Revert mailroom:campaign_control from pg: back to the v0.4.0 functions
-- this change redefined (finish_campaigns judged the campaign row and its
-- backlog and live mail in one UPDATE, whose subqueries kept the snapshot
-- from before it waited for the campaign's row). The others are as in v0.4.0.

BEGIN;

CREATE OR REPLACE FUNCTION mailroom.finish_campaigns()
RETURNS integer
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = mailroom, pg_temp
AS $$
DECLARE
  v_count integer;
BEGIN
  -- Done = no live mail left that may still be sent (review mail waits for
  -- an operator and does not keep a campaign open, as in v0.3), and none
  -- not queued yet (a backlog row).
  UPDATE mailroom.campaigns k
  SET status = 'done', finished_at = now(), updated_at = now()
  WHERE k.status = 'active'
    AND NOT EXISTS (SELECT FROM mailroom.campaign_backlog b WHERE b.campaign_id = k.id)
    AND NOT EXISTS (SELECT FROM mailroom.contents c JOIN mailroom.queue q ON q.id = c.id
                    WHERE c.campaign_id = k.id AND q.status IN ('queued', 'sending', 'paused'));
  GET DIAGNOSTICS v_count = ROW_COUNT;
  RETURN v_count;
END
$$;
ALTER FUNCTION mailroom.finish_campaigns() OWNER TO mailroom_owner;
REVOKE ALL ON FUNCTION mailroom.finish_campaigns() FROM PUBLIC;
GRANT EXECUTE ON FUNCTION mailroom.finish_campaigns() TO mailroom_operator;
COMMENT ON FUNCTION mailroom.finish_campaigns() IS
  'Housekeeping (pg_cron job mailroom-materialize): mark active campaigns with nothing queued, sending, paused or not queued yet as done. Returns how many.';

COMMIT;
