-- The hot path's plans are generic: each session plans a statement once, on
-- the tables as they are then. A runner started on a nearly empty queue
-- must not keep plans that walk the whole queue, contents or ledger once
-- they have grown (a claim took 7 s at 300,000 queued with such a plan).
-- Counted here by the index entries the calls read in this transaction
-- (pg_stat_get_xact_tuples_returned), not by time.
BEGIN;
SELECT plan(10);
SET LOCAL client_min_messages = warning;
TRUNCATE mailroom.queue, mailroom.contents, mailroom.attempts;
TRUNCATE mailroom.suppressions;

CREATE FUNCTION pg_temp.entries_read(p_index regclass) RETURNS bigint
LANGUAGE sql AS $$ SELECT pg_stat_get_xact_tuples_returned(p_index) $$;

-- 1. A session's first calls, on three mails: every statement of the claim,
--    of a report (a sent, a retry and one under a lease it does not hold:
--    the second pass and the late-report path) and of reclaim is planned
--    while the tables hold a handful of rows.
SELECT mailroom.enqueue('first' || g || '@example.com', 'Hi', 'B', p_delivery_key => 'first-' || g)
FROM generate_series(1, 3) g;
ANALYZE mailroom.queue;
ANALYZE mailroom.contents;
ANALYZE mailroom.attempts;
CREATE TEMP TABLE c1 AS SELECT * FROM mailroom.claim_batch('w', 10);
SELECT mailroom.mark_outcomes(jsonb_build_array(
  (SELECT jsonb_build_object('id', id, 'token', lease_token, 'outcome', 'sent') FROM c1 ORDER BY id LIMIT 1),
  (SELECT jsonb_build_object('id', id, 'token', lease_token, 'outcome', 'retry') FROM c1 ORDER BY id OFFSET 1 LIMIT 1),
  (SELECT jsonb_build_object('id', id, 'token', gen_random_uuid(), 'outcome', 'sent') FROM c1 ORDER BY id OFFSET 2 LIMIT 1)));
SELECT mailroom._reclaim(1000, now() + interval '1 day');
-- ... and a claim under a default domain limit (its own statements).
SELECT mailroom.set_domain_limits('*', 100000, 1000000);
SELECT mailroom.enqueue('limited@example.com', 'Hi', 'B', p_delivery_key => 'limited-1');
CREATE TEMP TABLE c0 AS SELECT * FROM mailroom.claim_batch('w', 10);
SELECT mailroom.mark_outcomes((SELECT jsonb_agg(jsonb_build_object('id', id, 'token', lease_token, 'outcome', 'sent')) FROM c0));
SELECT mailroom.set_domain_limits('*', NULL, NULL);

-- 2. Then the queue, the contents and the ledger grow to 20,000 rows each
--    (no ANALYZE: the plans stay as they were made).
WITH c AS (
  INSERT INTO mailroom.contents (delivery_key, to_address, subject, body_text, sender, created_at)
  SELECT 'grown-' || g, 'user' || g || '@example.org', 'Hi', 'B', 'default', now() - interval '1 minute'
  FROM generate_series(1, 20000) g
  RETURNING id, priority, sender, max_attempts, on_ambiguous, created_at
)
INSERT INTO mailroom.queue (id, priority, run_at, sender, max_attempts, on_ambiguous, updated_at)
SELECT c.id, c.priority, c.created_at, c.sender, c.max_attempts, c.on_ambiguous, c.created_at FROM c;
-- (A made-up history of mail that has no contents: only its size matters here.)
INSERT INTO mailroom.attempts (message_id, attempt, finished_at, outcome, finished_as, status_reason)
SELECT 1000000000 + g, 1, now(), 'cancelled', 'cancelled', 'cancelled' FROM generate_series(1, 20000) g;

CREATE TEMP TABLE before AS
SELECT pg_temp.entries_read('mailroom.queue_pkey') AS queue_pkey,
       pg_temp.entries_read('mailroom.contents_pkey') AS contents_pkey,
       pg_temp.entries_read('mailroom.attempts_pkey') AS attempts_pkey;

-- 3. The same session claims 50, reports them (one under a lease it does
--    not hold) and reclaims what it leased: each reads about its own rows.
CREATE TEMP TABLE c2 AS SELECT * FROM mailroom.claim_batch('w', 50);
SELECT is((SELECT count(*) FROM c2), 50::bigint, 'the grown queue is claimed');
SELECT cmp_ok(pg_temp.entries_read('mailroom.queue_pkey') - (SELECT queue_pkey FROM before), '<', 1000::bigint,
  'a claim of 50 planned on an empty queue reads about 50 entries of the queue''s primary key, not the whole queue');
SELECT cmp_ok(pg_temp.entries_read('mailroom.contents_pkey') - (SELECT contents_pkey FROM before), '<', 1000::bigint,
  '... and of the contents'' primary key');

UPDATE before SET queue_pkey = pg_temp.entries_read('mailroom.queue_pkey'),
                  contents_pkey = pg_temp.entries_read('mailroom.contents_pkey'),
                  attempts_pkey = pg_temp.entries_read('mailroom.attempts_pkey');
SELECT is(mailroom.mark_outcomes(
  (SELECT jsonb_agg(jsonb_build_object('id', id, 'token', CASE WHEN n = 1 THEN gen_random_uuid() ELSE lease_token END,
                                       'outcome', CASE WHEN n <= 25 THEN 'sent' ELSE 'retry' END))
   FROM (SELECT id, lease_token, row_number() OVER (ORDER BY id) AS n FROM c2) AS r)),
  49, 'the 49 reports under a live lease are applied');
SELECT cmp_ok(pg_temp.entries_read('mailroom.queue_pkey') - (SELECT queue_pkey FROM before), '<', 1000::bigint,
  'a report of 50 planned on an empty queue reads about its own entries of the queue''s primary key');
SELECT cmp_ok(pg_temp.entries_read('mailroom.attempts_pkey') - (SELECT attempts_pkey FROM before), '<', 1000::bigint,
  '... and of the ledger''s primary key (the second pass and the late report included)');

UPDATE before SET queue_pkey = pg_temp.entries_read('mailroom.queue_pkey');
SELECT is(mailroom._reclaim(1000, now() + interval '1 day'), 1, 'the one lease still held expires');
SELECT cmp_ok(pg_temp.entries_read('mailroom.queue_pkey') - (SELECT queue_pkey FROM before), '<', 1000::bigint,
  'reclaim planned on an empty queue reads about its own entries of the queue''s primary key');

-- 4. And a claim under the default domain limit, planned on three mails.
SELECT mailroom.set_domain_limits('*', 100000, 1000000);
UPDATE before SET contents_pkey = pg_temp.entries_read('mailroom.contents_pkey'),
                  queue_pkey = pg_temp.entries_read('mailroom.queue_pkey');
SELECT is((SELECT count(*) FROM mailroom.claim_batch('w', 50)), 50::bigint, 'the grown queue is claimed under a domain limit');
SELECT cmp_ok(pg_temp.entries_read('mailroom.contents_pkey') - (SELECT contents_pkey FROM before), '<', 1000::bigint,
  'a claim of 50 under a domain limit planned on an empty queue reads about its own entries of the contents'' primary key');

SELECT * FROM finish();
ROLLBACK;
