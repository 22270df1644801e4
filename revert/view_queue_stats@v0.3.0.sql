-- Revert mailroom:view_queue_stats from pg: back to the v0.1.0 definitions
-- (deploy/view_queue_stats@v0.1.0.sql). The pg_read_all_stats grant dates
-- from v0.1.0 and stays.

BEGIN;

DROP VIEW mailroom.queue_stats;
DROP FUNCTION mailroom.open_transactions(timestamptz);

CREATE FUNCTION mailroom.open_transactions(p_now timestamptz DEFAULT clock_timestamp())
RETURNS TABLE (
  kind             text,
  pid              integer,
  usename          name,
  application_name text,
  client_addr      inet,
  state            text,
  xact_start       timestamptz,
  age              interval,
  prepared_gid     text
)
LANGUAGE sql STABLE
SECURITY DEFINER
SET search_path = mailroom, pg_temp
AS $$
  -- No query text: operators see who holds a transaction, not what it reads.
  SELECT CASE WHEN a.query = '<insufficient privilege>' THEN 'hidden' ELSE 'transaction' END,
         a.pid, a.usename, a.application_name, a.client_addr, a.state, a.xact_start,
         p_now - a.xact_start, NULL::text
  FROM pg_catalog.pg_stat_activity a
  WHERE a.datname = current_database()
    AND a.backend_type NOT LIKE 'autovacuum%'
    AND (a.xact_start IS NOT NULL OR a.query = '<insufficient privilege>')
  UNION ALL
  SELECT 'prepared', NULL, p.owner, NULL, NULL, 'prepared', p.prepared, p_now - p.prepared, p.gid
  FROM pg_catalog.pg_prepared_xacts p
  WHERE p.database = current_database()
  ORDER BY 8 DESC NULLS LAST
$$;
ALTER FUNCTION mailroom.open_transactions(timestamptz) OWNER TO mailroom_owner;
REVOKE ALL ON FUNCTION mailroom.open_transactions(timestamptz) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION mailroom.open_transactions(timestamptz) TO mailroom_operator;
COMMENT ON FUNCTION mailroom.open_transactions(timestamptz) IS
  'Open transactions in this database, oldest first: kind transaction (pid for pg_terminate_backend), prepared (prepared_gid for ROLLBACK PREPARED) or hidden (another role''s session mailroom_owner cannot see: grant it pg_read_all_stats). Who and how long, never the query text. p_now defaults to clock_timestamp(), not now(): ages are measured at the call, not from the start of the caller''s own transaction.';

CREATE VIEW mailroom.queue_stats WITH (security_barrier) AS
WITH cfg AS (
  SELECT coalesce((SELECT value::interval FROM mailroom.settings WHERE key = 'lease_warning_after'),
                  interval '5 minutes') AS warn_after
),
tx AS (
  SELECT * FROM mailroom.open_transactions()
),
stats AS (
  SELECT 'queue'::text AS kind,
         m.sender,
         m.status,
         count(*) AS messages,
         count(*) FILTER (WHERE m.status = 'queued' AND m.run_at <= now()) AS due,
         now() - min(m.created_at) AS oldest_age,
         now() - min(m.run_at) FILTER (WHERE m.status = 'queued' AND m.run_at <= now()) AS oldest_due_age,
         NULL::text AS warning,
         NULL::text AS detail
  FROM mailroom.messages m
  GROUP BY m.sender, m.status
),
warnings AS (
  SELECT 'warning'::text, NULL::text, NULL::text, count(*), NULL::bigint, max(t.age), NULL::interval,
         'long_transaction',
         format('%s transaction(s) open longer than lease_warning_after (%s), the oldest for %s (%s): vacuum cannot remove dead queue rows behind it and the queue bloats; end it (see mailroom.open_transactions())',
                count(*), (SELECT warn_after FROM cfg), date_trunc('second', max(t.age)),
                (array_agg(coalesce('pid ' || t.pid, 'prepared ' || t.prepared_gid) || coalesce(' ' || t.usename, '')
                           || coalesce(' ' || nullif(t.application_name, ''), '') || coalesce(' ' || t.state, '')
                           ORDER BY t.age DESC))[1])
  FROM tx t
  WHERE t.kind IN ('transaction', 'prepared') AND t.age > (SELECT warn_after FROM cfg)
  HAVING count(*) > 0
  UNION ALL
  SELECT 'warning', NULL, NULL, count(*), NULL, NULL, NULL,
         'sessions_hidden',
         format('%s session(s) of other roles are invisible to mailroom_owner, so long transactions may go unnoticed: GRANT pg_read_all_stats TO mailroom_owner', count(*))
  FROM tx t
  WHERE t.kind = 'hidden'
  HAVING count(*) > 0
  UNION ALL
  SELECT 'warning', NULL, NULL, count(*), NULL, now() - min(m.leased_until), NULL,
         'expired_leases',
         format('%s lease(s) expired and not yet reclaimed, the oldest %s ago: reclaim is not running (no pg_cron job and no runner calling it?); run SELECT mailroom.reclaim()',
                count(*), date_trunc('second', now() - min(m.leased_until)))
  FROM mailroom.messages m
  WHERE m.status = 'sending' AND m.leased_until < now() - interval '1 minute'
  HAVING count(*) > 0
  UNION ALL
  SELECT 'warning', NULL, 'review', count(*), NULL, now() - min(m.updated_at), NULL,
         'review_waiting',
         format('%s mail(s) wait for an operator decision, the oldest for %s: see mailroom.review_queue and mailroom.resolve_review()',
                count(*), date_trunc('second', now() - min(m.updated_at)))
  FROM mailroom.messages m
  WHERE m.status = 'review'
  HAVING count(*) > 0
)
SELECT s.kind, s.sender, s.status, s.messages, s.due, s.oldest_age, s.oldest_due_age, s.warning, s.detail
FROM (SELECT * FROM stats UNION ALL SELECT * FROM warnings) s
ORDER BY s.kind, s.sender, s.status, s.warning;
ALTER VIEW mailroom.queue_stats OWNER TO mailroom_owner;
REVOKE ALL ON mailroom.queue_stats FROM PUBLIC;
GRANT SELECT ON mailroom.queue_stats TO mailroom_operator;
COMMENT ON VIEW mailroom.queue_stats IS
  'Queue depth and age per sender and status (kind = queue), then warnings (kind = warning): long_transaction (vacuum pinned: the queue will bloat), sessions_hidden, expired_leases (reclaim not running), review_waiting.';
COMMENT ON COLUMN mailroom.queue_stats.oldest_age IS
  'Queue rows: now() - the oldest created_at in the group. Warning rows: age of the oldest offending item.';
COMMENT ON COLUMN mailroom.queue_stats.oldest_due_age IS
  'Queued rows only: how long the oldest due mail has waited past its run_at (the overdue age).';
COMMENT ON COLUMN mailroom.queue_stats.warning IS
  'Warning code on warning rows (long_transaction, sessions_hidden, expired_leases, review_waiting); detail says what it means and what to do.';

COMMIT;
