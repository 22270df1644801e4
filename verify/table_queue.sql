-- Verify mailroom:table_queue on pg

BEGIN;

SELECT id, status, status_reason, priority, run_at, sender, attempts, max_attempts, on_ambiguous,
       lease_token, leased_until, worker, claimed_at, last_error, updated_at
FROM mailroom.queue WHERE false;
DO $$ BEGIN
  ASSERT (SELECT count(*) FROM pg_catalog.pg_indexes
          WHERE schemaname = 'mailroom' AND indexname IN ('queue_claim_idx', 'queue_reclaim_idx')) = 2,
         'the partial claim and reclaim indexes are missing';
END $$;

ROLLBACK;
