-- Tests for mailroom:console_reads
BEGIN;
SELECT plan(53);
SET LOCAL client_min_messages = warning;
TRUNCATE mailroom.queue, mailroom.contents, mailroom.attempts CASCADE;  -- the v0.4 tables (split_messages)
TRUNCATE mailroom.suppressions, mailroom.senders, mailroom.rate_limits, mailroom.domain_budgets;
\ir include/core_state.psql

-- Contract: each is a definer the operator may execute, and nobody else.
SELECT is_definer('mailroom', f, a) FROM (VALUES
  ('throughput', ARRAY['interval', 'interval']), ('send_rate_usage', ARRAY[]::text[]),
  ('suppression_search', ARRAY['text', 'integer']), ('schedule_list', ARRAY['integer']),
  ('find_messages', ARRAY['text', 'integer']), ('campaign_summaries', ARRAY['integer'])) AS x(f, a);
SELECT function_privs_are('mailroom', f, a, r, CASE WHEN r = 'mailroom_operator' THEN ARRAY['EXECUTE'] ELSE ARRAY[]::text[] END,
                          f || ' for ' || r)
FROM (VALUES ('throughput', ARRAY['interval', 'interval']), ('find_messages', ARRAY['text', 'integer']),
             ('suppression_search', ARRAY['text', 'integer']), ('campaign_summaries', ARRAY['integer'])) AS x(f, a),
     unnest(ARRAY['mailroom_operator', 'mailroom_app', 'mailroom_runner']) r;

-- throughput: attempts bucketed by the minute they were claimed, per sender.
SELECT pg_temp.t_mail(k, s, '2026-03-02 09:00Z') FROM (VALUES ('a', 'default'), ('b', 'default'), ('c', 'news'),
  ('d', 'default'), ('old', 'default')) AS x(k, s);
SELECT pg_temp.t_claim('a', 'w', '2026-03-02 10:00:10Z'); SELECT pg_temp.t_end('a', 'sent', '2026-03-02 10:00:11Z', 'sent');
SELECT pg_temp.t_claim('b', 'w', '2026-03-02 10:00:40Z'); SELECT pg_temp.t_end('b', 'retry', '2026-03-02 10:00:41Z', 'retry');
SELECT pg_temp.t_claim('b', 'w', '2026-03-02 10:01:05Z'); SELECT pg_temp.t_end('b', 'failed', '2026-03-02 10:01:06Z', 'failed');
SELECT pg_temp.t_claim('c', 'w', '2026-03-02 10:01:20Z'); SELECT pg_temp.t_end('c', 'sent', '2026-03-02 10:01:21Z', 'sent');
SELECT pg_temp.t_claim('d', 'w', '2026-03-02 10:02:00Z'); SELECT pg_temp.t_end('d', 'expired', '2026-03-02 10:03:00Z');
SELECT pg_temp.t_claim('old', 'w', '2026-03-02 08:59:00Z'); SELECT pg_temp.t_end('old', 'sent', '2026-03-02 08:59:01Z', 'sent');
SELECT results_eq(
  $$SELECT bucket_start, sent, retried, failed FROM mailroom._throughput('1 hour', '1 minute', '2026-03-02 10:02:30Z')$$,
  $$VALUES ('2026-03-02 10:00Z'::timestamptz, 1::bigint, 1::bigint, 0::bigint),
           ('2026-03-02 10:01Z', 1, 0, 1),
           ('2026-03-02 10:02Z', 0, 1, 0)$$,
  'per minute: sent, retried (retry or expired), failed; attempts before the window are left out');
SELECT results_eq(
  $$SELECT bucket_start, sent, retried, failed FROM mailroom._throughput('1 day', '1 hour', '2026-03-02 10:30Z')$$,
  $$VALUES ('2026-03-02 08:00Z'::timestamptz, 1::bigint, 0::bigint, 0::bigint), ('2026-03-02 10:00Z', 2, 2, 1)$$,
  'per hour over the day, epoch-aligned buckets');
UPDATE mailroom.attempts SET claimed_at = claimed_at + (now() - '2026-03-02 10:30Z');  -- the same history, ending now
SELECT results_eq($$SELECT sender, failed FROM mailroom.failures_by_sender('1 day')$$,
  $$VALUES ('default'::text, 1::bigint)$$, 'failed attempts per sender in the window');
UPDATE mailroom.attempts SET claimed_at = claimed_at - (now() - '2026-03-02 10:30Z');
SELECT is_empty($$SELECT * FROM mailroom.throughput()$$, 'the public function reads up to now(): nothing in the last hour');
SELECT throws_ok($$SELECT * FROM mailroom.throughput('1 hour', '10 seconds')$$, '22023',
  'mailroom: bucket: must be between 1 minute and 1 day, got 00:00:10', 'a bucket under a minute is refused');
SELECT throws_ok($$SELECT * FROM mailroom.throughput('2 days', '1 minute')$$, '22023',
  'mailroom: window: must be between one bucket and 1440 buckets (00:01:00), got 2 days', 'too many buckets are refused');

-- overdue_counts: queued mail due for longer than p_after, per sender.
SELECT pg_temp.t_mail(k, s, now() - interval '1 hour', p_run_at => now() - w) FROM (VALUES
  ('od-1', 'default', interval '10 minutes'), ('od-2', 'default', interval '30 seconds'),
  ('od-3', 'news', interval '2 minutes'), ('od-4', 'news', interval '-5 minutes')) AS x(k, s, w);
SELECT results_eq($$SELECT sender, overdue, oldest_overdue FROM mailroom.overdue_counts()$$,
  $$VALUES ('default'::text, 2::bigint, now() - '2026-03-02 10:03Z'), ('news', 1, interval '2 minutes')$$,
  'due for over a minute, per sender (d went back to the queue on 2 March; not od-2, nor the mail due later)');
SELECT is((SELECT sum(overdue) FROM mailroom.overdue_counts('0')), 4::numeric, 'p_after 0: every due mail');
SELECT throws_ok($$SELECT * FROM mailroom.overdue_counts(NULL)$$, '22023',
  'mailroom: after: must be between 0 and 30 days, got NULL', 'no p_after is refused');

-- send_rate_usage: limits and what claim_batch spent of them.
SELECT mailroom.set_sender_limits('news', 10, 100);
SELECT mailroom.set_domain_limits('example.com', NULL, 50);
SELECT mailroom._send_rate_record(ARRAY['mailroom/sender/news/s', 'mailroom/sender/news/m'],
                                  ARRAY[3, 7], ARRAY[interval '1 second', interval '1 minute'], now());
-- 4 sends to example.com, 2 to other.org, in their per-minute windows
SELECT count(*) FROM mailroom._domain_budgets_spend('{example.com, example.com, example.com, example.com, other.org, other.org}',
                                                    array_fill(NULL::integer, ARRAY[6]), array_fill(50, ARRAY[6]), now());
SELECT results_eq(
  $$SELECT kind, name, max_per_second, max_per_minute, used_last_second, used_last_minute FROM mailroom.send_rate_usage()$$,
  $$VALUES ('sender'::text, 'news'::text, 10, 100, 3, 7),
           ('domain', '*', NULL::integer, NULL::integer, NULL::integer, NULL::integer),
           ('domain', 'example.com', NULL, 50, NULL, 4),
           ('domain', 'other.org', NULL, NULL, NULL, 2)$$,
  'senders, the default domain row, domains with their own row, domains spending the default: limits and use');

-- suppression_search
SELECT mailroom.suppress('Ann@Example.com', 'manual', 'console');
SELECT mailroom.suppress('bob@example.org', 'complaint', 'fbl');
SELECT mailroom.suppress('carol@example.net', 'unsubscribed');
SELECT results_eq($$SELECT address FROM mailroom.suppression_search('ANN@ex')$$, $$VALUES ('Ann@Example.com'::text)$$,
  'a substring of the address, case-insensitive');
SELECT results_eq($$SELECT address FROM mailroom.suppression_search('complaint')$$, $$VALUES ('bob@example.org'::text)$$,
  'a reason');
SELECT results_eq($$SELECT address FROM mailroom.suppression_search('FBL')$$, $$VALUES ('bob@example.org'::text)$$, 'a source');
SELECT is((SELECT count(*) FROM mailroom.suppression_search(NULL)), 3::bigint, 'no query: the newest');
SELECT is((SELECT count(*) FROM mailroom.suppression_search('', 2)), 2::bigint, 'at most p_limit');
SELECT throws_ok($$SELECT * FROM mailroom.suppression_search('x', 0)$$, '22023',
  'mailroom: limit: must be between 1 and 1000, got 0', 'a bad limit is refused');
-- Each way of matching reads its own index (deploy/console_reads.sql): % and _
-- are plain characters, a row matching two ways comes once, and the newest
-- p_limit of all matches come, newest first.
SELECT mailroom.suppress('under_score@example.com', 'manual', 'console');
SELECT mailroom.suppress('fifty%off@example.com', 'manual', 'console');
SELECT mailroom.suppress('complaint-desk@example.org', 'complaint', 'fbl');
UPDATE mailroom.suppressions SET created_at = now() - interval '1 hour' WHERE address = 'bob@example.org';
SELECT results_eq($$SELECT address FROM mailroom.suppression_search('_')$$, $$VALUES ('under_score@example.com'::text)$$,
  'an underscore is an underscore, not any character');
SELECT results_eq($$SELECT address FROM mailroom.suppression_search('%')$$, $$VALUES ('fifty%off@example.com'::text)$$,
  'a percent sign is a percent sign');
SELECT results_eq($$SELECT address FROM mailroom.suppression_search('complaint')$$,
  $$VALUES ('complaint-desk@example.org'::text), ('bob@example.org')$$,
  'matched by its address and by its reason, a row comes once; newest first');
SELECT results_eq($$SELECT address FROM mailroom.suppression_search('fbl', 1)$$,
  $$VALUES ('complaint-desk@example.org'::text)$$, 'the newest p_limit of the matches');

-- schedule_list
SELECT mailroom.upsert_template('weekly', 'W', 'Hello', NULL);
SELECT mailroom.schedule_upsert('s-1', 'sam@example.com', '0 8 * * 1', 'Europe/Paris', 'weekly', '{"secret": "x"}');
SELECT results_eq($$SELECT schedule_key, to_address, rule, active FROM mailroom.schedule_list()$$,
  $$VALUES ('s-1'::text, 'sam@example.com'::text, '0 8 * * 1'::text, true)$$, 'the schedules');
SELECT throws_ok($$SELECT * FROM mailroom.schedule_list(0)$$, '22023',
  'mailroom: limit: must be between 1 and 10000, got 0', 'a bad limit is refused');

-- find_messages
SELECT results_eq($$SELECT delivery_key, matched_by FROM mailroom.find_messages('c')$$,
  $$VALUES ('c'::text, 'delivery_key'::text)$$, 'by delivery key');
SELECT results_eq(format($$SELECT delivery_key, matched_by FROM mailroom.find_messages(%L)$$, pg_temp.t_id('d')),
  $$VALUES ('d'::text, 'id'::text)$$, 'by id');
SELECT results_eq(format($$SELECT delivery_key, matched_by FROM mailroom.find_messages(%L)$$,
    '<' || left(encode(sha256(convert_to('b', 'UTF8')), 'hex'), 40) || '.' || pg_temp.t_id('b') || '@tests.mailroom.invalid>'),
  $$VALUES ('b'::text, 'message_id'::text)$$, 'by Message-ID as the runner writes it');
SELECT results_eq($$SELECT delivery_key FROM mailroom.find_messages(upper('a@example.com'))$$,
  $$VALUES ('a'::text)$$, 'by recipient, case-insensitive');
SELECT is_empty($$SELECT * FROM mailroom.find_messages('a@example.com', 1)$$,
  'recipients are looked for among the latest p_scan mails only');
SELECT throws_ok($$SELECT * FROM mailroom.find_messages(' ')$$, '22023',
  'mailroom: query: an id, delivery key, Message-ID or recipient of 1 to 998 characters is required', 'an empty query is refused');

-- campaign_summaries: what campaign_progress shows (finished = sent + failed
-- + cancelled), from the queue and index-only counts instead of the history.
SELECT mailroom.upsert_template('cs-news', 'News', 'Hello', NULL);
CREATE TEMP TABLE cs AS
SELECT x.name, mailroom.enqueue_campaign(x.name, 'cs-news',
         format('SELECT g AS recipient_id, %L || g || ''@example.org'' AS email FROM generate_series(1, %s) g', x.name, x.n),
         p_send_at => now() + x.send_in) AS id
FROM (VALUES ('cs-going', 8, interval '-1 minute'), ('cs-paused', 3, interval '-1 minute'),
             ('cs-cancelled', 2, interval '-1 minute'), ('cs-done', 2, interval '-1 minute'),
             ('cs-later', 2, interval '1 hour')) AS x(name, n, send_in);
CREATE FUNCTION pg_temp.cs_key(p_campaign text, p_n integer) RETURNS text LANGUAGE sql AS $$
  SELECT c.delivery_key FROM mailroom.contents c WHERE c.campaign_id = (SELECT id FROM cs WHERE name = p_campaign)
  ORDER BY c.id OFFSET p_n - 1 LIMIT 1
$$;
-- cs-going: sent in the last minute, sent before it, failed, sending, in
-- review, a retry in backoff for two hours, and two due.
SELECT pg_temp.t_claim(pg_temp.cs_key('cs-going', 1), 'w', now() - interval '30 seconds');
SELECT pg_temp.t_end(pg_temp.cs_key('cs-going', 1), 'sent', now() - interval '20 seconds', 'sent');
SELECT pg_temp.t_claim(pg_temp.cs_key('cs-going', 2), 'w', now() - interval '5 minutes');
SELECT pg_temp.t_end(pg_temp.cs_key('cs-going', 2), 'sent', now() - interval '4 minutes', 'sent');
SELECT pg_temp.t_claim(pg_temp.cs_key('cs-going', 3), 'w', now() - interval '30 seconds');
SELECT pg_temp.t_end(pg_temp.cs_key('cs-going', 3), 'failed', now() - interval '10 seconds', 'failed');
SELECT pg_temp.t_claim(pg_temp.cs_key('cs-going', 4), 'w', now() - interval '5 seconds');
SELECT pg_temp.t_claim(pg_temp.cs_key('cs-going', 5), 'w', now() - interval '3 minutes');
SELECT pg_temp.t_end(pg_temp.cs_key('cs-going', 5), 'expired', now() - interval '1 minute', p_next => 'review');
UPDATE mailroom.queue SET run_at = now() + interval '2 hours' WHERE id = pg_temp.t_id(pg_temp.cs_key('cs-going', 6));
SELECT mailroom.pause_campaign((SELECT id FROM cs WHERE name = 'cs-paused'));
SELECT mailroom.cancel_campaign((SELECT id FROM cs WHERE name = 'cs-cancelled'));
-- cs-cut: queued a chunk at a time (chunks of 2 here, deploy/campaign_chunks.sql),
-- and an operator cancels one of its mails before its chunk is queued.
CREATE OR REPLACE FUNCTION mailroom._campaign_chunk_size() RETURNS integer
LANGUAGE sql IMMUTABLE SECURITY DEFINER SET search_path = mailroom, pg_temp AS $$ SELECT 2 $$;
INSERT INTO cs
SELECT 'cs-cut', mailroom.enqueue_campaign('cs-cut', 'cs-news',
         'SELECT g AS recipient_id, ''cs-cut'' || g || ''@example.org'' AS email FROM generate_series(1, 5) g',
         p_send_at => now() - interval '1 minute');
SELECT mailroom.cancel(ARRAY[pg_temp.t_id(pg_temp.cs_key('cs-cut', 5))], 'operator');
SELECT pg_temp.t_claim(pg_temp.cs_key('cs-done', g), 'w', now() - interval '6 minutes') FROM generate_series(1, 2) g;
SELECT pg_temp.t_end(pg_temp.cs_key('cs-done', g), 'sent', now() - interval '5 minutes', 'sent') FROM generate_series(1, 2) g;
SELECT results_eq(
  $$SELECT campaign_id, name, status, priority, send_at, total, finished, queued, paused, sending, review,
           sent_last_minute, send_rate_per_second, oldest_queued_age, eta, created_at, finished_at, due, waiting,
           next_due_at, eta_note
    FROM mailroom.campaign_summaries() WHERE campaign_id IN (SELECT id FROM cs) ORDER BY campaign_id$$,
  $$SELECT campaign_id, name, status, priority, send_at, total, sent + failed + cancelled, queued, paused, sending, review,
           sent_last_minute, send_rate_per_second, oldest_queued_age, eta, created_at, finished_at, due, waiting,
           next_due_at, eta_note
    FROM mailroom.campaign_progress WHERE campaign_id IN (SELECT id FROM cs) ORDER BY campaign_id$$,
  'campaign_summaries agrees with campaign_progress: going, paused, cancelled, done, not yet due, mail not queued yet cancelled by an operator');
SELECT results_eq(
  $$SELECT name, status, total, finished, queued, sending, review, sent_last_minute, due, waiting, eta
    FROM mailroom.campaign_summaries() s JOIN cs USING (name) ORDER BY s.campaign_id$$,
  $$VALUES ('cs-going'::text, 'active'::text, 8::bigint, 3::bigint, 3::bigint, 1::bigint, 1::bigint, 1::bigint, 2::bigint,
            1::bigint, interval '2 hours 1 minute'),
           ('cs-paused', 'paused', 3, 0, 0, 0, 0, 0, 0, 0, NULL),
           ('cs-cancelled', 'cancelled', 2, 2, 0, 0, 0, 0, 0, 0, NULL),
           ('cs-done', 'done', 2, 2, 0, 0, 0, 0, 0, 0, NULL),
           ('cs-later', 'active', 2, 0, 2, 0, 0, 0, 0, 2, NULL),
           ('cs-cut', 'active', 5, 1, 4, 0, 0, 0, 4, 0, NULL)$$,
  'the fixture is what it says (so the agreement above is not of two empty sets): the ETA waits for the retry in backoff');
SELECT results_eq($$SELECT name FROM mailroom.campaign_summaries(1)$$, $$VALUES ('cs-cut'::text)$$,
  'the newest p_limit campaigns');
SELECT throws_ok($$SELECT * FROM mailroom.campaign_summaries(0)$$, '22023',
  'mailroom: limit: must be between 1 and 1000, got 0', 'a bad limit is refused');
-- The total is what enqueue_campaign counted (mailroom.campaign_mail_counts),
-- a re-run adding recipients included.
SELECT mailroom.enqueue_campaign('cs-later', 'cs-news',
  'SELECT g AS recipient_id, ''cs-later'' || g || ''@example.org'' AS email FROM generate_series(1, 5) g',
  p_send_at => now() + interval '1 hour');
SELECT results_eq(
  $$SELECT s.total FROM mailroom.campaign_summaries() s JOIN cs USING (name) WHERE name = 'cs-later'$$,
  $$SELECT count(*) FROM mailroom.contents WHERE campaign_id = (SELECT id FROM cs WHERE name = 'cs-later')$$,
  'a re-run that adds 3 recipients adds 3 to the total');
SELECT is((SELECT count(*) FROM mailroom.integrity_problems() WHERE problem = 'campaign_mail_count_off'), 0::bigint,
  'the counts are right');
UPDATE mailroom.campaign_mail_counts SET mails = mails + 1 WHERE campaign_id = (SELECT id FROM cs WHERE name = 'cs-later');
SELECT is((SELECT count(*) FROM mailroom.integrity_problems() WHERE problem = 'campaign_mail_count_off'), 1::bigint,
  'integrity_problems reports a count gone wrong');

SELECT * FROM finish();
ROLLBACK;
