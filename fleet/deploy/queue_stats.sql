-- Deploy mailroom_fleet:queue_stats to pg
-- requires: schema

-- RUN ON ALL runs once per distinct connect string: partitions that name
-- one database are one shard here, so nothing is counted twice. A shard is
-- tagged with its database name (current_database() on the shard: give the
-- shards distinct names). Every call needs every shard: one that refuses
-- connections fails the call (docs/fleet.md), there is no partial answer.

BEGIN;

CREATE FUNCTION mailroom_fleet.queue_stats()
RETURNS TABLE (shard text, kind text, sender text, status text, messages bigint, due bigint,
               oldest_age interval, oldest_due_age interval, warning text, detail text)
LANGUAGE plproxy
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
  CLUSTER 'mailroom_fleet';
  RUN ON ALL;
  SELECT pg_catalog.current_database()::text AS shard, s.kind, s.sender, s.status, s.messages, s.due,
         s.oldest_age, s.oldest_due_age, s.warning, s.detail
  FROM mailroom.queue_stats s;
$$;
ALTER FUNCTION mailroom_fleet.queue_stats() OWNER TO mailroom_fleet_owner;
REVOKE ALL ON FUNCTION mailroom_fleet.queue_stats() FROM PUBLIC;
GRANT EXECUTE ON FUNCTION mailroom_fleet.queue_stats() TO mailroom_fleet_operator;
COMMENT ON FUNCTION mailroom_fleet.queue_stats() IS
  'Every shard''s mailroom.queue_stats (queue depth and age per sender and status, then warnings), each row tagged with its shard''s database name. Fails when a shard cannot be reached.';

-- One row per shard, computed on the shard, so a shard with an empty queue
-- and no warning still answers (with zeros).
CREATE FUNCTION mailroom_fleet.queue_summary()
RETURNS TABLE (shard text, messages bigint, due bigint, queued bigint, sending bigint, paused bigint,
               review bigint, oldest_age interval, oldest_due_age interval, warnings bigint)
LANGUAGE plproxy
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
  CLUSTER 'mailroom_fleet';
  RUN ON ALL;
  SELECT pg_catalog.current_database()::text AS shard,
         coalesce(sum(s.messages) FILTER (WHERE s.kind = 'queue'), 0)::bigint AS messages,
         coalesce(sum(s.due) FILTER (WHERE s.kind = 'queue'), 0)::bigint AS due,
         coalesce(sum(s.messages) FILTER (WHERE s.kind = 'queue' AND s.status = 'queued'), 0)::bigint AS queued,
         coalesce(sum(s.messages) FILTER (WHERE s.kind = 'queue' AND s.status = 'sending'), 0)::bigint AS sending,
         coalesce(sum(s.messages) FILTER (WHERE s.kind = 'queue' AND s.status = 'paused'), 0)::bigint AS paused,
         coalesce(sum(s.messages) FILTER (WHERE s.kind = 'queue' AND s.status = 'review'), 0)::bigint AS review,
         max(s.oldest_age) FILTER (WHERE s.kind = 'queue') AS oldest_age,
         max(s.oldest_due_age) FILTER (WHERE s.kind = 'queue') AS oldest_due_age,
         count(*) FILTER (WHERE s.kind = 'warning') AS warnings
  FROM mailroom.queue_stats s;
$$;
ALTER FUNCTION mailroom_fleet.queue_summary() OWNER TO mailroom_fleet_owner;
REVOKE ALL ON FUNCTION mailroom_fleet.queue_summary() FROM PUBLIC;
GRANT EXECUTE ON FUNCTION mailroom_fleet.queue_summary() TO mailroom_fleet_operator;
COMMENT ON FUNCTION mailroom_fleet.queue_summary() IS
  'One row per shard: its live mail (messages, due, and by status queued, sending, paused, review), the age of its oldest live and oldest due mail, and how many warnings its queue_stats shows (read mailroom_fleet.queue_stats() for them).';

CREATE FUNCTION mailroom_fleet.fleet_summary()
RETURNS TABLE (shards bigint, messages numeric, due numeric, queued numeric, sending numeric, paused numeric,
               review numeric, oldest_age interval, oldest_due_age interval, warnings numeric)
LANGUAGE sql
SECURITY DEFINER
SET search_path = mailroom_fleet, pg_temp
AS $$
  SELECT count(*), sum(q.messages), sum(q.due), sum(q.queued), sum(q.sending), sum(q.paused), sum(q.review),
         max(q.oldest_age), max(q.oldest_due_age), sum(q.warnings)
  FROM mailroom_fleet.queue_summary() q
$$;
ALTER FUNCTION mailroom_fleet.fleet_summary() OWNER TO mailroom_fleet_owner;
REVOKE ALL ON FUNCTION mailroom_fleet.fleet_summary() FROM PUBLIC;
GRANT EXECUTE ON FUNCTION mailroom_fleet.fleet_summary() TO mailroom_fleet_operator;
COMMENT ON FUNCTION mailroom_fleet.fleet_summary() IS
  'The fleet in one row: how many shards answered (all of them, or the call fails) and queue_summary() added up over them; ages are the oldest of any shard.';

COMMIT;
