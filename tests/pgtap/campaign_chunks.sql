-- pgTAP: a campaign's queue rows are made lazily, a chunk at a time
-- (deploy/campaign_chunks.sql), and every campaign behaviour holds for the
-- mail that is not queued yet. Chunks of 4 here (the real size is 5,000).
BEGIN;
SELECT plan(58);
SET LOCAL timezone = 'UTC';

CREATE OR REPLACE FUNCTION mailroom._campaign_chunk_size() RETURNS integer
LANGUAGE sql IMMUTABLE SECURITY DEFINER SET search_path = mailroom, pg_temp AS $$ SELECT 4 $$;

CREATE TABLE public.t_people (id int PRIMARY KEY, email text);
INSERT INTO public.t_people SELECT g, 'p' || g || '@example.org' FROM generate_series(1, 10) g;
GRANT SELECT ON public.t_people TO mailroom_app;
SELECT mailroom.upsert_template('news', 'News', 'Hello');

-- how a campaign's mail stands: queue rows, finishing rows, neither
CREATE FUNCTION pg_temp.states(p_campaign bigint) RETURNS TABLE (queued bigint, finished bigint, unqueued bigint)
LANGUAGE sql AS $$
  SELECT count(q.id), count(f.id), count(*) FILTER (WHERE q.id IS NULL AND f.id IS NULL)
  FROM mailroom.contents c
  LEFT JOIN mailroom.queue q ON q.id = c.id
  LEFT JOIN mailroom.attempts f ON f.message_id = c.id AND f.finished_as IS NOT NULL
  WHERE c.campaign_id = p_campaign
$$;

-- enqueue_campaign writes every contents row and queues the first chunk only
SET ROLE mailroom_app;
CREATE TEMP TABLE k AS
SELECT mailroom.enqueue_campaign('lazy', 'news', 'SELECT id AS recipient_id, email FROM public.t_people') AS id;
RESET ROLE;
SELECT is((SELECT (s.queued, s.finished, s.unqueued)::text FROM pg_temp.states((SELECT id FROM k)) s), '(4,0,6)',
  'enqueue_campaign of 10: 10 contents rows, the first chunk (4) queued, 6 not queued yet');
SELECT is((SELECT queued_through FROM mailroom.campaign_backlog WHERE campaign_id = (SELECT id FROM k)),
  (SELECT id FROM mailroom.contents WHERE campaign_id = (SELECT id FROM k) ORDER BY id OFFSET 3 LIMIT 1),
  'the cursor stands on the last mail of the first chunk');
SELECT is((SELECT array_agg(recipient_id ORDER BY c.id) FROM mailroom.contents c JOIN mailroom.queue q USING (id)
           WHERE c.campaign_id = (SELECT id FROM k)),
  ARRAY['1', '10', '2', '3'], 'chunks follow the ids, which follow the delivery keys');
SELECT is_empty($$SELECT * FROM mailroom.integrity_problems()$$,
  'mail not queued yet in an open campaign is no integrity problem');
SELECT results_eq($$SELECT status, status_reason, count(*)::int FROM mailroom.messages
                    WHERE campaign_id = (SELECT id FROM k) GROUP BY 1, 2 ORDER BY 2 NULLS FIRST$$,
  $$VALUES ('queued', NULL::text, 4), ('queued', 'not_yet_queued', 6)$$,
  'messages shows mail not queued yet as queued (status_reason not_yet_queued)');
SELECT is((SELECT (j->>'status') || '/' || (j->>'status_reason') || '/' || coalesce(j->>'run_at', '-')
           FROM mailroom.inspect('campaign:' || (SELECT id FROM k) || ':9') j), 'queued/not_yet_queued/-',
  'inspect shows it so too');
SELECT results_eq($$SELECT total, queued, paused, due, status FROM mailroom.campaign_progress WHERE campaign_id = (SELECT id FROM k)$$,
  $$VALUES (10::bigint, 10::bigint, 0::bigint, 10::bigint, 'active')$$,
  'campaign_progress counts mail not queued yet as queued and due');
SELECT results_eq($$SELECT total, finished, queued, due, status FROM mailroom.campaign_summaries() WHERE campaign_id = (SELECT id FROM k)$$,
  $$VALUES (10::bigint, 0::bigint, 10::bigint, 10::bigint, 'active')$$,
  'campaign_summaries (the console) counts it as queued too, not as finished');
SELECT is(mailroom.finish_campaigns(), 0, 'finish_campaigns leaves a campaign with mail not queued yet open');

-- idempotency: a re-run adds nobody and queues nothing twice
SET ROLE mailroom_app;
SELECT mailroom.enqueue_campaign('lazy', 'news', 'SELECT id AS recipient_id, email FROM public.t_people');
RESET ROLE;
SELECT is((SELECT (s.queued, s.finished, s.unqueued)::text FROM pg_temp.states((SELECT id FROM k)) s), '(4,0,6)',
  'a re-run adds 0 rows and queues nothing again');

-- claims: the next chunk comes once the newest chunk's lower half is gone
SELECT is((SELECT count(*)::int FROM mailroom.claim_batch('w', 1)), 1, 'a claim of 1');
SELECT is((SELECT queued FROM pg_temp.states((SELECT id FROM k))), 4::bigint, 'half of the chunk is still there: no chunk yet');
SELECT is((SELECT count(*)::int FROM mailroom.claim_batch('w', 1)), 1, 'a second claim of 1 takes the lower half');
SELECT is((SELECT count(*)::int FROM mailroom.claim_batch('w', 1)), 1, 'the third claim ...');
SELECT is((SELECT (s.queued, s.unqueued)::text FROM pg_temp.states((SELECT id FROM k)) s), '(8,2)',
  '... queued the next chunk first (half a chunk ahead of the drain)');
SELECT is((SELECT count(*)::int FROM mailroom.claim_batch('w', 100)), 5, 'a claim of 100 gets all that is queued');
SELECT is((SELECT count(*)::int FROM mailroom.claim_batch('w', 100)), 2, 'the next claim queues the last chunk and gets it');
SELECT is((SELECT (s.queued, s.unqueued)::text FROM pg_temp.states((SELECT id FROM k)) s), '(10,0)', 'every mail has its queue row, once');
SELECT is((SELECT count(*)::int FROM mailroom.campaign_backlog WHERE campaign_id = (SELECT id FROM k)), 0,
  'the backlog row goes with the last chunk');
SELECT is((SELECT count(DISTINCT id)::int FROM mailroom.queue q JOIN mailroom.contents c USING (id)
           WHERE c.campaign_id = (SELECT id FROM k) AND q.status = 'sending'), 10, 'ten mails claimed, each once');

-- a new recipient on a fully queued campaign: a new cursor above its mail
INSERT INTO public.t_people VALUES (11, 'p11@example.org');
SET ROLE mailroom_app;
SELECT is(mailroom.enqueue_campaign('lazy', 'news', 'SELECT id AS recipient_id, email FROM public.t_people')::int,
  (SELECT id FROM k)::int, 'a re-run with one recipient more');
RESET ROLE;
SELECT is((SELECT (s.queued, s.unqueued)::text FROM pg_temp.states((SELECT id FROM k)) s), '(11,0)', 'it is queued at once, nothing twice');

-- a re-run of a done campaign that adds nobody leaves no backlog behind
UPDATE mailroom.campaigns SET status = 'done' WHERE id = (SELECT id FROM k);
SET ROLE mailroom_app;
SELECT mailroom.enqueue_campaign('lazy', 'news', 'SELECT id AS recipient_id, email FROM public.t_people');
RESET ROLE;
SELECT is((SELECT count(*)::int FROM mailroom.campaign_backlog WHERE campaign_id = (SELECT id FROM k)), 0,
  'a re-run of a done campaign that adds nobody leaves no backlog row');
UPDATE mailroom.campaigns SET status = 'active' WHERE id = (SELECT id FROM k);

-- addresses are checked and suppressions honoured when a chunk is queued
DELETE FROM public.t_people;
INSERT INTO public.t_people SELECT g, 'q' || g || '@example.org' FROM generate_series(1, 9) g;
UPDATE public.t_people SET email = 'not an address' WHERE id = 7;
SET ROLE mailroom_app;
CREATE TEMP TABLE k2 AS
SELECT mailroom.enqueue_campaign('checked', 'news', 'SELECT id AS recipient_id, email FROM public.t_people', p_priority => 5) AS id;
RESET ROLE;
SELECT mailroom.suppress('q8@example.org', 'unsubscribed');
SELECT is(mailroom._campaign_queue_all((SELECT id FROM k2), now()), 5::bigint, 'the rest, queued at once (the revert does this)');
SELECT results_eq($$SELECT recipient_id, status, status_reason FROM mailroom.messages
                    WHERE campaign_id = (SELECT id FROM k2) AND recipient_id IN ('6', '7', '8') ORDER BY 1$$,
  $$VALUES ('6', 'queued', NULL::text), ('7', 'cancelled', 'invalid_address'), ('8', 'cancelled', 'suppressed')$$,
  'a chunk finishes malformed and (just now) suppressed addresses as cancelled, as enqueue_campaign did');
SELECT is_empty($$SELECT * FROM mailroom.integrity_problems()$$, 'and leaves no mail without its state');

-- priorities hold across chunks: a priority-5 campaign's next chunk is
-- queued before the pick, ahead of a long line of priority-0 mail
DELETE FROM public.t_people WHERE id > 8;
UPDATE public.t_people SET email = 'u' || id || '@example.org';
SET ROLE mailroom_app;
CREATE TEMP TABLE k3 AS
SELECT mailroom.enqueue_campaign('urgent', 'news', 'SELECT id AS recipient_id, email FROM public.t_people',
  p_priority => 5) AS id;
RESET ROLE;
SELECT mailroom.enqueue('o' || g || '@example.org', 'Other', 'body', p_delivery_key => 'other-' || g)
FROM generate_series(1, 20) g;
UPDATE mailroom.queue q SET status = 'sending', lease_token = gen_random_uuid(), leased_until = now() + interval '1 hour'
FROM mailroom.contents c WHERE c.id = q.id AND c.campaign_id IN (SELECT id FROM k2);
CREATE TEMP TABLE claimed AS SELECT b.id FROM mailroom.claim_batch('w', 2) b;
INSERT INTO claimed SELECT b.id FROM mailroom.claim_batch('w', 2) b;
INSERT INTO claimed SELECT b.id FROM mailroom.claim_batch('w', 2) b;
INSERT INTO claimed SELECT b.id FROM mailroom.claim_batch('w', 2) b;
SELECT is((SELECT count(*)::int FROM claimed b JOIN mailroom.contents c ON c.id = b.id WHERE c.campaign_id = (SELECT id FROM k3)), 8,
  'four claims of 2: all eight of the priority-5 campaign (two chunks), none of the 20 transactional mails');

-- pause: no chunk for a paused campaign; resume: the drain goes on
DELETE FROM public.t_people;
INSERT INTO public.t_people SELECT g, 'r' || g || '@example.org' FROM generate_series(1, 10) g;
SET ROLE mailroom_app;
CREATE TEMP TABLE k4 AS
SELECT mailroom.enqueue_campaign('paused one', 'news', 'SELECT id AS recipient_id, email FROM public.t_people', p_priority => 9) AS id;
RESET ROLE;
SELECT mailroom.pause_campaign((SELECT id FROM k4));
SELECT results_eq($$SELECT queued, paused, due FROM mailroom.campaign_progress WHERE campaign_id = (SELECT id FROM k4)$$,
  $$VALUES (0::bigint, 10::bigint, 0::bigint)$$, 'a paused campaign''s mail not queued yet counts as paused');
SELECT results_eq($$SELECT queued, paused FROM mailroom.campaign_summaries() WHERE campaign_id = (SELECT id FROM k4)$$,
  $$VALUES (0::bigint, 10::bigint)$$, 'on the console too');
SELECT is((SELECT count(*)::int FROM mailroom.claim_batch('w', 100) b JOIN mailroom.contents c ON c.id = b.id
           WHERE c.campaign_id = (SELECT id FROM k4)), 0, 'a paused campaign''s mail is not claimed ...');
SELECT is((SELECT (s.queued, s.unqueued)::text FROM pg_temp.states((SELECT id FROM k4)) s), '(4,6)', '... nor queued');
SELECT is(mailroom.resume_campaign((SELECT id FROM k4)), 4, 'resume queues the paused chunk again');
SELECT is((SELECT count(*)::int FROM mailroom.claim_batch('w', 3) b JOIN mailroom.contents c ON c.id = b.id
           WHERE c.campaign_id = (SELECT id FROM k4)), 3, 'claims take its mail again');
SELECT is((SELECT count(*)::int FROM mailroom.claim_batch('w', 1) b JOIN mailroom.contents c ON c.id = b.id
           WHERE c.campaign_id = (SELECT id FROM k4)), 1, 'the next claim ...');
SELECT is((SELECT (s.queued, s.unqueued)::text FROM pg_temp.states((SELECT id FROM k4)) s), '(8,2)', '... queues its next chunk first');

-- an operator cancels one mail not queued yet: finished, never queued
SELECT results_eq($$SELECT previous_status, status FROM mailroom.cancel(ARRAY[
                      (SELECT max(id) FROM mailroom.contents WHERE campaign_id = (SELECT id FROM k4))], 'operator')$$,
  $$VALUES ('queued', 'cancelled')$$, 'cancel(ids) finishes a mail not queued yet');
SELECT is((SELECT (s.queued, s.finished, s.unqueued)::text FROM pg_temp.states((SELECT id FROM k4)) s), '(8,1,1)',
  'it has its finishing row and no queue row');
SELECT is(mailroom._campaign_queue_all((SELECT id FROM k4), now()), 2::bigint, 'its chunk passes over it ...');
SELECT is((SELECT (s.queued, s.finished, s.unqueued)::text FROM pg_temp.states((SELECT id FROM k4)) s), '(9,1,0)',
  '... without a queue row for it');

-- what operators read for "how much is queued" counts the mail not queued
-- yet, from the backlog row's count (no count of the index above the cursor)
DELETE FROM public.t_people;
INSERT INTO public.t_people SELECT g, 's' || g || '@example.org' FROM generate_series(1, 10) g;
SET ROLE mailroom_app;
CREATE TEMP TABLE k6 AS
SELECT mailroom.enqueue_campaign('counted', 'news', 'SELECT id AS recipient_id, email FROM public.t_people',
  p_sender => 'bulk6', p_send_at => now() - interval '10 minutes') AS id;
RESET ROLE;
SELECT is((SELECT unqueued FROM mailroom.campaign_backlog WHERE campaign_id = (SELECT id FROM k6)), 6::bigint,
  'the backlog row counts the 6 mails not queued yet');
SELECT results_eq($$SELECT status, messages, due, oldest_due_age FROM mailroom.queue_stats WHERE kind = 'queue' AND sender = 'bulk6'$$,
  $$VALUES ('queued'::text, 10::bigint, 10::bigint, interval '10 minutes')$$,
  'queue_stats: a campaign of 10 with a chunk of 4 queued shows 10 queued and due (not 4), due since its send_at');
SELECT results_eq($$SELECT overdue FROM mailroom.overdue_counts() WHERE sender = 'bulk6'$$, $$VALUES (10::bigint)$$,
  'overdue_counts (the console) counts them too');
SELECT results_eq($$SELECT cancelled.status FROM mailroom.cancel(ARRAY[
                      (SELECT max(id) FROM mailroom.contents WHERE campaign_id = (SELECT id FROM k6))], 'operator') cancelled$$,
  $$VALUES ('cancelled'::text)$$, 'an operator cancels one mail not queued yet ...');
SELECT is((SELECT messages FROM mailroom.queue_stats WHERE kind = 'queue' AND sender = 'bulk6'), 9::bigint,
  '... queue_stats counts 9');
SELECT results_eq($$SELECT total, finished, queued, due FROM mailroom.campaign_summaries() WHERE campaign_id = (SELECT id FROM k6)$$,
  $$SELECT total, cancelled, queued, due FROM mailroom.campaign_progress WHERE campaign_id = (SELECT id FROM k6)$$,
  'campaign_summaries counts it as finished at once, as campaign_progress does');
SELECT is((SELECT (total, finished, queued)::text FROM mailroom.campaign_summaries() WHERE campaign_id = (SELECT id FROM k6)),
  '(10,1,9)', '(10 in all, 1 finished, 9 queued)');
SELECT mailroom.pause_campaign((SELECT id FROM k6));
SELECT results_eq($$SELECT status, messages, due FROM mailroom.queue_stats WHERE kind = 'queue' AND sender = 'bulk6'$$,
  $$VALUES ('paused'::text, 9::bigint, 0::bigint)$$, 'a paused campaign''s mail, queued or not, counts as paused');
SELECT mailroom.resume_campaign((SELECT id FROM k6));
UPDATE mailroom.campaigns SET send_at = now() + interval '1 hour' WHERE id = (SELECT id FROM k6);
UPDATE mailroom.queue q SET run_at = now() + interval '1 hour' FROM mailroom.contents c
WHERE c.id = q.id AND c.campaign_id = (SELECT id FROM k6);
SELECT results_eq($$SELECT status, messages, due FROM mailroom.queue_stats WHERE kind = 'queue' AND sender = 'bulk6'$$,
  $$VALUES ('queued'::text, 9::bigint, 0::bigint)$$, 'mail not queued yet of a campaign that starts later is not due');
UPDATE mailroom.campaigns SET send_at = now() - interval '1 second' WHERE id = (SELECT id FROM k6);
UPDATE mailroom.queue q SET run_at = now() - interval '1 second' FROM mailroom.contents c
WHERE c.id = q.id AND c.campaign_id = (SELECT id FROM k6);
SELECT is_empty($$SELECT * FROM mailroom.integrity_problems()$$, 'the count is what the campaign has (integrity_problems checks it)');
UPDATE mailroom.campaign_backlog SET unqueued = unqueued + 1 WHERE campaign_id = (SELECT id FROM k6);
SELECT is((SELECT problem FROM mailroom.integrity_problems()), 'backlog_count_off', 'a count gone wrong is reported');
UPDATE mailroom.campaign_backlog SET unqueued = unqueued - 1 WHERE campaign_id = (SELECT id FROM k6);
SELECT is(mailroom._campaign_queue_all((SELECT id FROM k6), now()), 6::bigint, 'the rest queued (one of it finished) ...');
SELECT results_eq($$SELECT status, messages, due FROM mailroom.queue_stats WHERE kind = 'queue' AND sender = 'bulk6'$$,
  $$VALUES ('queued'::text, 9::bigint, 9::bigint)$$, '... the counts stay right once the chunks have passed');

-- cancel_campaign finishes the mail not queued yet too
DELETE FROM public.t_people WHERE id > 9;
SET ROLE mailroom_app;
CREATE TEMP TABLE k5 AS
SELECT mailroom.enqueue_campaign('cancelled one', 'news', 'SELECT id AS recipient_id, email FROM public.t_people') AS id;
RESET ROLE;
SELECT is(mailroom.cancel_campaign((SELECT id FROM k5)), 9, 'cancel_campaign: 4 queued and 5 not queued yet, all finished');
SELECT is((SELECT (s.queued, s.finished, s.unqueued)::text FROM pg_temp.states((SELECT id FROM k5)) s), '(0,9,0)',
  'nothing of a cancelled campaign is left without a state');
SELECT results_eq($$SELECT total, queued, cancelled, status FROM mailroom.campaign_progress WHERE campaign_id = (SELECT id FROM k5)$$,
  $$VALUES (9::bigint, 0::bigint, 9::bigint, 'cancelled')$$, 'campaign_progress counts them as cancelled');
SELECT is_empty($$SELECT * FROM mailroom.integrity_problems()$$, 'no integrity problem after the cancel');

-- integrity: mail of a cancelled campaign without a state is still found
DELETE FROM mailroom.attempts WHERE message_id = (SELECT max(id) FROM mailroom.contents WHERE campaign_id = (SELECT id FROM k5));
SELECT is((SELECT problem FROM mailroom.integrity_problems()), 'contents_without_state',
  'a mail without a state outside an open campaign''s backlog is reported');
INSERT INTO mailroom.campaign_backlog (campaign_id, queued_through, chunk_first, chunk_middle)
VALUES ((SELECT id FROM k5), 0, 0, 0);
SELECT is((SELECT string_agg(problem, ',' ORDER BY problem) FROM mailroom.integrity_problems()),
  'backlog_of_closed_campaign,contents_without_state', 'so is a backlog row of a cancelled campaign');

SELECT * FROM finish();
ROLLBACK;
