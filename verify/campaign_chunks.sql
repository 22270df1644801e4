-- Verify mailroom:campaign_chunks on pg

BEGIN;

SELECT 'mailroom._campaign_queue_chunk(bigint, integer, timestamptz)'::regprocedure,
       'mailroom._campaign_top_up(timestamptz)'::regprocedure,
       'mailroom._campaign_chunk_size()'::regprocedure,
       'mailroom._campaign_queue_all(bigint, timestamptz)'::regprocedure;

ROLLBACK;
