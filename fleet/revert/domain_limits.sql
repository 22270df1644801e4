-- Revert mailroom_fleet:domain_limits from pg
-- The shards keep the shares last set on them (mailroom.domain_limits rows):
-- clear_domain_limit each domain first to remove them.

BEGIN;

DO $$
BEGIN
  IF EXISTS (SELECT FROM pg_catalog.pg_extension WHERE extname = 'pg_cron') THEN
    PERFORM cron.unschedule(jobname) FROM cron.job WHERE jobname = 'mailroom-fleet-rebalance';
  END IF;
END
$$;

DROP FUNCTION mailroom_fleet.domain_demand();
DROP FUNCTION mailroom_fleet.list_domain_limits();
DROP FUNCTION mailroom_fleet.clear_domain_limit(text);
DROP FUNCTION mailroom_fleet.set_domain_limit(text, integer, integer);
DROP FUNCTION mailroom_fleet.rebalance_domain_limits(text);
DROP FUNCTION mailroom_fleet._rebalance(text[], boolean);
DROP FUNCTION mailroom_fleet._split(integer, integer, text[], bigint[]);
DROP FUNCTION mailroom_fleet._limit_domain(text);
DROP FUNCTION mailroom_fleet._shards_delete_domain_limits(text);
DROP FUNCTION mailroom_fleet._shards_set_domain_limits(integer[], text[], integer[], integer[]);
DROP FUNCTION mailroom_fleet._shard_domain_demand(integer, text[]);
DROP TABLE mailroom_fleet.domain_shares;
DROP TABLE mailroom_fleet.domain_limits;

COMMIT;
