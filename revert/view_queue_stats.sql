-- Revert mailroom:view_queue_stats from pg: back to the v0.4.0 view, which
-- counts the caller's own session among the transactions it warns about.

BEGIN;

-- v0.1.0 warned about every transaction open longer than lease_warning_after
-- as if it held back vacuum. What holds back vacuum is the xmin horizon, and
-- only these pin it: a session holding a snapshot (backend_xmin: a running
-- statement, or an idle REPEATABLE READ or SERIALIZABLE transaction), a
-- session holding a transaction id (backend_xid: it wrote something), a
-- prepared transaction, and a replication slot's xmin. An idle READ COMMITTED
-- transaction that wrote nothing pins nothing; it still holds its locks and
-- a connection, so it stays a (different) warning.
--
-- Sessions of other roles show neither unless the reader has
-- pg_read_all_stats: the v0.1.0 deploy granted it to mailroom_owner.

CREATE OR REPLACE FUNCTION mailroom.open_transactions()
RETURNS TABLE (
  kind             text,
  pid              integer,
  usename          name,
  application_name text,
  client_addr      inet,
  state            text,
  xact_start       timestamptz,
  age              interval,
  prepared_gid     text,
  pins_horizon     boolean,
  horizon_xid_age  integer
)
LANGUAGE sql STABLE
SECURITY DEFINER
SET search_path = mailroom, pg_temp
AS $$
  -- No query text: operators see who holds a transaction, not what it reads.
  SELECT CASE WHEN a.query = '<insufficient privilege>' THEN 'hidden' ELSE 'transaction' END,
         a.pid, a.usename, a.application_name, a.client_addr, a.state, a.xact_start,
         clock_timestamp() - a.xact_start, NULL::text,
         a.backend_xmin IS NOT NULL OR a.backend_xid IS NOT NULL,
         greatest(pg_catalog.age(a.backend_xmin), pg_catalog.age(a.backend_xid))
  FROM pg_catalog.pg_stat_activity a
  WHERE a.datname = current_database()
    AND a.backend_type NOT LIKE 'autovacuum%'
    AND (a.xact_start IS NOT NULL OR a.query = '<insufficient privilege>')
  UNION ALL
  SELECT 'prepared', NULL, p.owner, NULL, NULL, 'prepared', p.prepared, clock_timestamp() - p.prepared, p.gid,
         true, pg_catalog.age(p.transaction)
  FROM pg_catalog.pg_prepared_xacts p
  WHERE p.database = current_database()
  ORDER BY 8 DESC NULLS LAST
$$;
ALTER FUNCTION mailroom.open_transactions() OWNER TO mailroom_owner;
REVOKE ALL ON FUNCTION mailroom.open_transactions() FROM PUBLIC;
GRANT EXECUTE ON FUNCTION mailroom.open_transactions() TO mailroom_operator;
COMMENT ON FUNCTION mailroom.open_transactions() IS
  'Open transactions in this database, oldest first: kind transaction (pid for pg_terminate_backend), prepared (prepared_gid for ROLLBACK PREPARED) or hidden (another role''s session mailroom_owner cannot see: grant it pg_read_all_stats). Who and how long, never the query text; pins_horizon: it holds a snapshot or a transaction id, so vacuum cannot remove rows that died after it (horizon_xid_age: how many transactions ago). Ages are measured with clock_timestamp(), not now(): at the call, not from the start of the caller''s own transaction.';

CREATE OR REPLACE VIEW mailroom.queue_stats WITH (security_barrier) AS
WITH cfg AS (
  SELECT coalesce((SELECT value::interval FROM mailroom.settings WHERE key = 'lease_warning_after'),
                  interval '5 minutes') AS warn_after
),
tx AS (
  SELECT t.*,
         coalesce('pid ' || t.pid, 'prepared ' || t.prepared_gid) || coalesce(' ' || t.usename, '')
           || coalesce(' ' || nullif(t.application_name, ''), '') || coalesce(' ' || t.state, '') AS who
  FROM mailroom.open_transactions() t
),
-- What holds the xmin horizon back: old transactions with a snapshot or a
-- transaction id, and replication slots no standby or consumer is attached
-- to (an active slot moves with its standby; an inactive one never does).
holders AS (
  SELECT t.who, t.age, t.horizon_xid_age
  FROM tx t
  WHERE t.kind IN ('transaction', 'prepared') AND t.pins_horizon AND t.age > (SELECT warn_after FROM cfg)
  UNION ALL
  SELECT format('replication slot %s (%s, inactive)', s.slot_name, s.slot_type), NULL::interval,
         pg_catalog.age(s.xmin)
  FROM pg_catalog.pg_replication_slots s
  WHERE s.xmin IS NOT NULL AND NOT s.active
),
-- The hot queue per sender and status; each group's oldest mail is its
-- lowest id (ids are handed out in enqueue order), looked up below.
live AS (
  SELECT q.sender, q.status, count(*) AS messages,
         count(*) FILTER (WHERE q.status = 'queued' AND q.run_at <= now()) AS due,
         min(q.id) AS oldest_id,
         min(q.run_at) FILTER (WHERE q.status = 'queued' AND q.run_at <= now()) AS oldest_due_at
  FROM mailroom.queue q
  GROUP BY q.sender, q.status
),
-- Campaign mail not queued yet (deploy/campaign_chunks.sql): a million-mail
-- campaign has one chunk in the hot queue and the rest here, counted by its
-- backlog row (one row per campaign, no count of its index). It is queued
-- (paused while the campaign is), due once the campaign's send_at has
-- passed; its oldest is the first mail above the cursor (one index probe).
unqueued AS (
  SELECT k.sender, CASE WHEN k.status = 'paused' THEN 'paused' ELSE 'queued' END AS status,
         b.unqueued AS messages,
         CASE WHEN k.status = 'active' AND k.send_at <= now() THEN b.unqueued ELSE 0 END AS due,
         (SELECT c.created_at FROM mailroom.contents c
          WHERE c.campaign_id = b.campaign_id AND c.id > b.queued_through
          ORDER BY c.id LIMIT 1) AS oldest_created,
         CASE WHEN k.status = 'active' AND k.send_at <= now() THEN k.send_at END AS oldest_due_at
  FROM mailroom.campaign_backlog b
  JOIN mailroom.campaigns k ON k.id = b.campaign_id
  WHERE b.unqueued > 0 AND k.status IN ('active', 'paused')
),
stats AS (
  SELECT 'queue'::text AS kind,
         g.sender,
         g.status,
         sum(g.messages)::bigint AS messages,
         sum(g.due)::bigint AS due,
         now() - min(g.oldest_created) AS oldest_age,
         now() - min(g.oldest_due_at) AS oldest_due_age,
         NULL::text AS warning,
         NULL::text AS detail
  FROM (SELECT l.sender, l.status, l.messages, l.due,
               (SELECT c.created_at FROM mailroom.contents c WHERE c.id = l.oldest_id) AS oldest_created,
               l.oldest_due_at
        FROM live l
        UNION ALL
        SELECT u.sender, u.status, u.messages, u.due, u.oldest_created, u.oldest_due_at
        FROM unqueued u) g
  GROUP BY g.sender, g.status
),
warnings AS (
  SELECT 'warning'::text, NULL::text, NULL::text, count(*), NULL::bigint, max(h.age), NULL::interval,
         'xmin_horizon',
         format('%s holder(s) pin the xmin horizon (transactions: for longer than lease_warning_after, %s), the oldest %s transactions back: %s%s. Vacuum cannot remove row versions that died after it, every claim and outcome leaves one in the queue, and it bloats; end it: pg_terminate_backend(pid), ROLLBACK PREPARED ''gid'', or pg_drop_replication_slot(''name'') for a slot nothing uses (see mailroom.open_transactions())',
                count(*), (SELECT warn_after FROM cfg), max(h.horizon_xid_age),
                (array_agg(h.who ORDER BY h.horizon_xid_age DESC NULLS LAST, h.age DESC NULLS LAST))[1],
                coalesce(', open for ' || date_trunc('second',
                  (array_agg(h.age ORDER BY h.horizon_xid_age DESC NULLS LAST, h.age DESC NULLS LAST))[1]), ''))
  FROM holders h
  HAVING count(*) > 0
  UNION ALL
  SELECT 'warning', NULL, NULL, count(*), NULL, max(t.age), NULL,
         'long_transaction',
         format('%s transaction(s) open longer than lease_warning_after (%s), the oldest for %s (%s): it holds no snapshot and no transaction id, so vacuum is not held back, but its locks stay held and its connection taken; finish or end it (see mailroom.open_transactions())',
                count(*), (SELECT warn_after FROM cfg), date_trunc('second', max(t.age)),
                (array_agg(t.who ORDER BY t.age DESC))[1])
  FROM tx t
  WHERE t.kind = 'transaction' AND NOT t.pins_horizon AND t.age > (SELECT warn_after FROM cfg)
  HAVING count(*) > 0
  UNION ALL
  SELECT 'warning', NULL, NULL, count(*), NULL, NULL, NULL,
         'sessions_hidden',
         format('%s session(s) of other roles are invisible to mailroom_owner, so long transactions may go unnoticed: GRANT pg_read_all_stats TO mailroom_owner', count(*))
  FROM tx t
  WHERE t.kind = 'hidden'
  HAVING count(*) > 0
  UNION ALL
  SELECT 'warning', NULL, NULL, count(*), NULL, now() - min(q.leased_until), NULL,
         'expired_leases',
         format('%s lease(s) expired and not yet reclaimed, the oldest %s ago: reclaim is not running (no pg_cron job and no runner calling it?); run SELECT mailroom.reclaim()',
                count(*), date_trunc('second', now() - min(q.leased_until)))
  FROM mailroom.queue q
  WHERE q.status = 'sending' AND q.leased_until < now() - interval '1 minute'
  HAVING count(*) > 0
  UNION ALL
  SELECT 'warning', NULL, 'review', count(*), NULL, now() - min(q.updated_at), NULL,
         'review_waiting',
         format('%s mail(s) wait for an operator decision, the oldest for %s: see mailroom.review_queue and mailroom.resolve_review()',
                count(*), date_trunc('second', now() - min(q.updated_at)))
  FROM mailroom.queue q
  WHERE q.status = 'review'
  HAVING count(*) > 0
)
SELECT s.kind, s.sender, s.status, s.messages, s.due, s.oldest_age, s.oldest_due_age, s.warning, s.detail
FROM (SELECT * FROM stats UNION ALL SELECT * FROM warnings) s
ORDER BY s.kind, s.sender, s.status, s.warning;
ALTER VIEW mailroom.queue_stats OWNER TO mailroom_owner;
REVOKE ALL ON mailroom.queue_stats FROM PUBLIC;
GRANT SELECT ON mailroom.queue_stats TO mailroom_operator;
COMMENT ON VIEW mailroom.queue_stats IS
  'Live mail (the hot queue: queued, sending, paused, review, plus campaign mail not queued yet as queued, or paused while its campaign is, due once the campaign''s send_at has passed) per sender and status with depth and age (kind = queue), then warnings (kind = warning): xmin_horizon (something pins vacuum: the queue will bloat), long_transaction (open long, pins nothing, holds its locks), sessions_hidden, expired_leases (reclaim not running), review_waiting.';
COMMENT ON COLUMN mailroom.queue_stats.oldest_age IS
  'Queue rows: age of the group''s oldest mail (now() - created_at of its lowest id). Warning rows: age of the oldest offending item (xmin_horizon: of the oldest transaction among the holders; NULL when only replication slots hold it).';
COMMENT ON COLUMN mailroom.queue_stats.oldest_due_age IS
  'Queued rows only: how long the oldest due mail has waited past its run_at (the overdue age).';
COMMENT ON COLUMN mailroom.queue_stats.warning IS
  'Warning code on warning rows (xmin_horizon, long_transaction, sessions_hidden, expired_leases, review_waiting); detail says what it means and what to do.';

COMMIT;
