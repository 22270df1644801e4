-- Tests for mailroom:table_queue
BEGIN;
SELECT plan(9);

SELECT has_table('mailroom', 'queue', 'the hot queue exists');
SELECT table_owner_is('mailroom', 'queue', 'mailroom_owner', 'owned by the owner role');
SELECT has_index('mailroom', 'queue', 'queue_claim_idx', ARRAY['priority', 'run_at', 'id'], 'claims walk one partial index');
SELECT has_index('mailroom', 'queue', 'queue_reclaim_idx', ARRAY['leased_until'], 'reclaim walks another');
SELECT is((SELECT count(*)::int FROM pg_indexes WHERE schemaname = 'mailroom' AND tablename = 'queue'), 3,
  'the primary key and the two partial indexes, nothing else');
SELECT ok((SELECT 'fillfactor=50' = ANY (reloptions) FROM pg_class WHERE oid = 'mailroom.queue'::regclass),
  'room on each page for the updates a live row gets');

SELECT is((SELECT array_agg(conname::text) FROM pg_catalog.pg_constraint WHERE conrelid = 'mailroom.queue'::regclass AND contype = 'c'),
  ARRAY['queue_lease_only_while_sending'], 'one check, the lease''s (integrity_problems() reports values out of their domains)');
SELECT throws_ok($$INSERT INTO mailroom.queue (id, status, sender, max_attempts, on_ambiguous) VALUES (-1, 'sending', 'default', 5, 'retry')$$,
  '23514', NULL, 'mail being sent carries its lease');
SET LOCAL ROLE mailroom_runner;
SELECT throws_ok($$UPDATE mailroom.queue SET status = 'queued'$$, '42501', NULL, 'runners cannot touch it directly');
RESET ROLE;

SELECT * FROM finish();
ROLLBACK;
