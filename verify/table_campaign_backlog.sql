-- Verify mailroom:table_campaign_backlog on pg

BEGIN;

SELECT campaign_id, queued_through, chunk_first, chunk_middle, unqueued, not_before, updated_at FROM mailroom.campaign_backlog WHERE false;

ROLLBACK;
