-- Revert mailroom:campaign_chunks from pg

BEGIN;

-- Before this change every mail had its queue row from the start: give the
-- unqueued ones theirs, so nothing is left that the older code cannot see.
SELECT mailroom._campaign_queue_all(b.campaign_id, now()) FROM mailroom.campaign_backlog b ORDER BY b.campaign_id;

DROP FUNCTION mailroom._campaign_queue_all(bigint, timestamptz);
DROP FUNCTION mailroom._campaign_top_up(timestamptz);
DROP FUNCTION mailroom._campaign_chunk_size();
DROP FUNCTION mailroom._campaign_queue_chunk(bigint, integer, timestamptz);

COMMIT;
