-- Deploy mailroom:integrity_problems to pg
-- requires: split_messages
-- requires: table_campaign_backlog

-- v0.4 dropped the ledger's foreign key (its check was 35-40 % of
-- mark_outcomes) and never gave the queue one: contents, queue and the
-- ledger are kept consistent by the functions that write them, in one
-- transaction each. This check says whether they did. The invariants:
--   every contents row has exactly one of a queue row (live) or a finishing
--   ledger row (finished), or is not queued yet in an open campaign (above
--   its campaign_backlog cursor, deploy/campaign_chunks.sql):
--   contents_without_state, finished_and_live;
--   a backlog row belongs to an open (active or paused) campaign:
--   backlog_of_closed_campaign; its count of mail not queued yet is right
--   (queue_stats and campaign_summaries read it): backlog_count_off;
--   a campaign's count of its mails in campaign_mail_counts is right
--   (campaign_summaries' total; reworked after v0.4.0): campaign_mail_count_off;
--   a queue row belongs to a contents row: queue_without_contents;
--   ledger rows belong to a contents row: ledger_without_contents;
--   queue and ledger rows hold values their writers write (the checks a
--   claim or a report would pay on every row: see table_queue and
--   attempts_value_checks_dropped): queue_value_unknown,
--   ledger_value_unknown.
-- (More than one finishing row per mail is impossible: the ledger's primary
-- key is (message_id, finish_key), and a finishing row's finish_key is 0.)
--
-- Cost: one statement, one snapshot, so a mail being finished concurrently
-- is never half-seen. It reads contents, the queue and the ledger about
-- once each (anti-joins the planner runs as hash or merge joins, never a
-- probe loop per row of history): linear in the size of the history, about
-- as long as a count(*) of each table. A check for an operator, a nightly
-- job or a test, not for a hot path.

BEGIN;

CREATE OR REPLACE FUNCTION mailroom.integrity_problems()
RETURNS TABLE (problem text, message_id bigint, detail text)
LANGUAGE sql STABLE
SECURITY DEFINER
SET search_path = mailroom, pg_temp
AS $$
  SELECT 'contents_without_state', c.id,
         'neither a queue row (live) nor a finishing ledger row (finished): the mail is lost'
  FROM mailroom.contents c
  WHERE NOT EXISTS (SELECT FROM mailroom.queue q WHERE q.id = c.id)
    AND NOT EXISTS (SELECT FROM mailroom.attempts f WHERE f.message_id = c.id AND f.finished_as IS NOT NULL)
    AND NOT EXISTS (SELECT FROM mailroom.campaign_backlog b JOIN mailroom.campaigns k ON k.id = b.campaign_id
                    WHERE b.campaign_id = c.campaign_id AND c.id > b.queued_through
                      AND k.status IN ('active', 'paused'))
  UNION ALL
  SELECT 'backlog_of_closed_campaign', NULL::bigint,
         format('campaign %s is %s but has a backlog row (mail above id %s is neither queued nor finished)',
                k.id, k.status, b.queued_through)
  FROM mailroom.campaign_backlog b
  JOIN mailroom.campaigns k ON k.id = b.campaign_id
  WHERE k.status NOT IN ('active', 'paused')
  UNION ALL
  SELECT 'backlog_count_off', NULL::bigint,
         format('campaign %s''s backlog row counts %s mail(s) not queued yet, but %s are (queue_stats and campaign_summaries read the count)',
                b.campaign_id, b.unqueued, n.unqueued)
  FROM mailroom.campaign_backlog b
  -- a closed campaign's backlog row is the problem above, whatever it counts
  JOIN mailroom.campaigns k ON k.id = b.campaign_id AND k.status IN ('active', 'paused')
  CROSS JOIN LATERAL (
    SELECT count(*) AS unqueued
    FROM mailroom.contents c
    WHERE c.campaign_id = b.campaign_id AND c.id > b.queued_through
      AND NOT EXISTS (SELECT FROM mailroom.queue q WHERE q.id = c.id)
      AND NOT EXISTS (SELECT FROM mailroom.attempts f WHERE f.message_id = c.id AND f.finished_as IS NOT NULL)
  ) n
  WHERE n.unqueued <> b.unqueued
  UNION ALL
  SELECT 'finished_and_live', q.id,
         format('queue status %s, but finished as %s (ledger row %s)', q.status, f.finished_as, f.id)
  FROM mailroom.queue q
  JOIN mailroom.attempts f ON f.message_id = q.id AND f.finished_as IS NOT NULL
  UNION ALL
  SELECT 'queue_without_contents', q.id,
         format('queue status %s: no contents row, so it cannot be sent', q.status)
  FROM mailroom.queue q
  WHERE NOT EXISTS (SELECT FROM mailroom.contents c WHERE c.id = q.id)
  UNION ALL
  SELECT 'queue_campaign_differs', q.id,
         format('queue row says campaign %s, its contents campaign %s (the circuit breaker counts the queue''s)',
                coalesce(q.campaign_id::text, 'none'), coalesce(c.campaign_id::text, 'none'))
  FROM mailroom.queue q
  JOIN mailroom.contents c ON c.id = q.id
  WHERE q.campaign_id IS DISTINCT FROM c.campaign_id
  UNION ALL
  SELECT 'ledger_without_contents', a.message_id,
         format('%s ledger row(s) of a mail with no contents row', count(*))
  FROM mailroom.attempts a
  WHERE NOT EXISTS (SELECT FROM mailroom.contents c WHERE c.id = a.message_id)
  GROUP BY a.message_id
  UNION ALL
  SELECT 'queue_value_unknown', q.id,
         format('status %s, priority %s, attempts %s of %s, on_ambiguous %s: not what the functions write',
                q.status, q.priority, q.attempts, q.max_attempts, q.on_ambiguous)
  FROM mailroom.queue q
  WHERE q.status NOT IN ('queued', 'sending', 'paused', 'review') OR q.priority NOT BETWEEN -100 AND 100
     OR q.attempts < 0 OR q.max_attempts NOT BETWEEN 1 AND 100 OR q.on_ambiguous NOT IN ('retry', 'review')
  UNION ALL
  SELECT 'ledger_value_unknown', a.message_id,
         format('ledger row %s: outcome %s, reported %s, finished_as %s, smtp_code %s, smtp_enhanced %s, '
                'smtp_text of %s characters, provider_id of %s: not what the functions write',
                a.id, coalesce(a.outcome, 'none'), coalesce(a.reported, 'none'), coalesce(a.finished_as, 'none'),
                coalesce(a.smtp_code::text, 'none'), coalesce(a.smtp_enhanced, 'none'),
                coalesce(length(a.smtp_text), 0), coalesce(length(a.provider_id), 0))
  FROM mailroom.attempts a
  WHERE a.outcome NOT IN ('sent', 'retry', 'failed', 'ambiguous', 'expired', 'stale', 'released', 'cancelled',
                          'resolved', 'bounced')
     OR a.reported NOT IN ('sent', 'retry', 'failed', 'ambiguous')
     OR a.finished_as NOT IN ('sent', 'failed', 'cancelled') OR (a.finished_as IS NOT NULL AND a.outcome IS NULL)
     OR a.smtp_code NOT BETWEEN 200 AND 599 OR a.smtp_enhanced !~ '^[245]\.[0-9]{1,3}\.[0-9]{1,3}$'
     OR length(a.smtp_text) > 1000 OR length(a.provider_id) > 255
  UNION ALL
  SELECT 'campaign_mail_count_off', NULL::bigint,
         format('campaign %s holds %s mail(s), but campaign_mail_counts says %s (campaign_summaries reads the count)',
                k.id, coalesce(n.mails, 0), coalesce(m.mails::text, 'nothing'))
  FROM mailroom.campaigns k
  LEFT JOIN mailroom.campaign_mail_counts m ON m.campaign_id = k.id
  LEFT JOIN (SELECT c.campaign_id, count(*) AS mails FROM mailroom.contents c
             WHERE c.campaign_id IS NOT NULL GROUP BY c.campaign_id) n ON n.campaign_id = k.id
  WHERE coalesce(n.mails, 0) <> coalesce(m.mails, 0)
  UNION ALL
  SELECT 'unknown_campaign', c.id, format('campaign_id %s has no campaign', c.campaign_id)
  FROM mailroom.contents c
  WHERE c.campaign_id IS NOT NULL
    AND NOT EXISTS (SELECT FROM mailroom.campaigns k WHERE k.id = c.campaign_id)
  UNION ALL
  SELECT 'unknown_schedule', c.id, format('schedule_id %s has no schedule', c.schedule_id)
  FROM mailroom.contents c
  WHERE c.schedule_id IS NOT NULL
    AND NOT EXISTS (SELECT FROM mailroom.schedules s WHERE s.id = c.schedule_id)
  ORDER BY 1, 2
$$;
ALTER FUNCTION mailroom.integrity_problems() OWNER TO mailroom_owner;
REVOKE ALL ON FUNCTION mailroom.integrity_problems() FROM PUBLIC;
GRANT EXECUTE ON FUNCTION mailroom.integrity_problems() TO mailroom_operator;
COMMENT ON FUNCTION mailroom.integrity_problems() IS
  'Broken invariants of contents, queue and ledger, one row per mail and problem (none when all is well): contents_without_state (neither live nor finished nor campaign mail not queued yet in an open campaign), backlog_of_closed_campaign (a done or cancelled campaign with a backlog row; message_id NULL), backlog_count_off (a backlog row''s count of mail not queued yet is not what its campaign has; message_id NULL), campaign_mail_count_off (campaign_mail_counts is not the number of the campaign''s mails; message_id NULL), finished_and_live (a queue row and a finishing ledger row), queue_without_contents, queue_campaign_differs (the queue row''s copy of the campaign is not its contents''), ledger_without_contents, queue_value_unknown and ledger_value_unknown (values no function writes: the checks a claim or a report would pay on every row), unknown_campaign, unknown_schedule (the checks that replace foreign keys). Reads the three tables once in one snapshot: linear in the history, a check for operators and tests, not a hot path.';

COMMIT;
