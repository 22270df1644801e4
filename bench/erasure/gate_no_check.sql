-- bench/_sql_ab.py PRE file: claim_batch's gate without any forgotten-address test (the floor the test's cost is measured against).
CREATE OR REPLACE FUNCTION mailroom._claim_gate(
  p_address_key    text,
  p_stream         text,
  p_campaign_id    bigint,
  p_schedule_id    bigint,
  p_recipient_zone text,
  p_now            timestamptz
)
RETURNS TABLE (verdict text)
LANGUAGE sql
STABLE
AS $$
  SELECT CASE
           WHEN EXISTS (SELECT FROM mailroom.suppressions s
                        WHERE s.address_key = p_address_key AND (s.stream IS NULL OR s.stream = p_stream)) THEN 'suppressed'
           WHEN p_campaign_id IS NULL AND p_schedule_id IS NULL THEN 'claim'
           ELSE (SELECT CASE
                          WHEN k.status = 'cancelled' THEN 'campaign_cancelled'
                          WHEN k.status = 'paused' THEN 'paused'
                          WHEN NOT sc.active THEN 'schedule_inactive'
                          WHEN mailroom._window_opening(p_recipient_zone, k.time_zone, k.window_start, k.window_end,
                                                        sc.time_zone, sc.window_start, sc.window_end, p_now) > p_now
                            THEN 'window'
                          ELSE 'claim'
                        END
                 FROM (SELECT) AS one
                 LEFT JOIN mailroom.campaigns k ON k.id = p_campaign_id
                 LEFT JOIN mailroom.schedules sc ON sc.id = p_schedule_id)
         END
$$;
