-- Deploy mailroom:campaign_lookup to pg
-- requires: table_campaigns
-- requires: campaign_control

-- A campaign's id and status by its name. A fleet (fleet/, docs/fleet.md)
-- knows a campaign by its name only: the same name is a campaign on every
-- shard, each with its own id. campaign_progress would answer too, but it
-- counts the campaign's mail (O(its size)) to say so.

BEGIN;

CREATE FUNCTION mailroom.campaign_lookup(p_name text)
RETURNS TABLE (campaign_id bigint, status text)
LANGUAGE sql STABLE
SECURITY DEFINER
SET search_path = mailroom, pg_temp
AS $$
  SELECT k.id, k.status FROM mailroom.campaigns k WHERE k.name OPERATOR(pg_catalog.=) p_name
$$;
ALTER FUNCTION mailroom.campaign_lookup(text) OWNER TO mailroom_owner;
REVOKE ALL ON FUNCTION mailroom.campaign_lookup(text) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION mailroom.campaign_lookup(text) TO mailroom_app, mailroom_operator;
COMMENT ON FUNCTION mailroom.campaign_lookup(text) IS
  'The campaign named p_name: its id and status (active, paused, cancelled, done); no row when there is none. Reads one row by the unique name.';

COMMIT;
