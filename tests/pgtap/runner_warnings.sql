-- Tests for mailroom:runner_warnings
BEGIN;
SELECT plan(12);
SET LOCAL client_min_messages = warning;
TRUNCATE mailroom.runners;
TRUNCATE mailroom.queue, mailroom.contents, mailroom.attempts CASCADE;  -- the v0.4 tables (split_messages)
TRUNCATE mailroom.suppressions;

SELECT has_function('mailroom', 'runner_warnings', ARRAY[]::text[]);
SELECT is_definer('mailroom', 'runner_warnings', ARRAY[]::text[]);
SELECT function_privs_are('mailroom', 'runner_warnings', ARRAY[]::text[], 'mailroom_operator', ARRAY['EXECUTE'],
  'operators may ask');
SELECT function_privs_are('mailroom', 'runner_warnings', ARRAY[]::text[], 'mailroom_runner', ARRAY[]::text[],
  'runners may not');

SELECT is_empty($$SELECT * FROM mailroom.runner_warnings()$$, 'no runner and no mail: nothing to say');

-- Mail due for two senders, one due in an hour; nobody runs.
SELECT mailroom.enqueue('a' || g || '@example.com', 'S', 'B', p_sender => s, p_send_at => now() - interval '2 minutes')
FROM generate_series(1, 2) g, unnest(ARRAY['default', 'news']) s;
SELECT mailroom.enqueue('later@example.com', 'S', 'B', p_sender => 'other', p_send_at => now() + interval '1 hour');
SELECT results_eq(
  $$SELECT warning, messages, oldest_age, detail FROM mailroom.runner_warnings()$$,
  $$VALUES ('no_live_runner'::text, 2::bigint, interval '2 minutes',
            '2 mail(s) of sender default are due and no live runner serves it, the oldest waiting for 00:02:00: start runners (mailroom run), or see mailroom.runner_status for the last ones seen'::text),
           ('no_live_runner', 2, interval '2 minutes',
            '2 mail(s) of sender news are due and no live runner serves it, the oldest waiting for 00:02:00: start runners (mailroom run), or see mailroom.runner_status for the last ones seen')$$,
  'due mail and no live runner: one warning per sender with due mail (not for mail due later)');

-- A runner serving only news; a lost runner that served everything does not count.
SELECT mailroom.runner_heartbeat('news-runner', gen_random_uuid(), 'h1', 1, '0.4.0', 'news', 4, '5 seconds', 0, 0, 0, 0, 0, true, NULL);
SELECT mailroom.runner_heartbeat('dead', gen_random_uuid(), 'h2', 2, '0.4.0', NULL, 4, '5 seconds', 0, 0, 0, 0, 0, true, NULL);
UPDATE mailroom.runners SET last_seen = now() - interval '1 minute' WHERE worker = 'dead';
SELECT results_eq($$SELECT warning, messages FROM mailroom.runner_warnings()$$,
  $$VALUES ('no_live_runner'::text, 2::bigint)$$, 'news is served; default is not (a lost runner serves nothing)');
SELECT ok((SELECT detail LIKE '%sender default%' FROM mailroom.runner_warnings()), 'the warning names the sender');

-- A live runner serving every sender, whose relay is down.
SELECT mailroom.runner_heartbeat('all-runner', gen_random_uuid(), 'h3', 3, '0.4.0', NULL, 4, '5 seconds', 0, 0, 0, 0, 0,
                                 false, 'connect: [Errno 111] Connection refused');
UPDATE mailroom.runners SET relay_down_since = now() - interval '90 seconds' WHERE worker = 'all-runner';
SELECT results_eq($$SELECT warning, messages, oldest_age, detail FROM mailroom.runner_warnings()$$,
  $$VALUES ('relay_down'::text, NULL::bigint, interval '90 seconds',
            'runner all-runner on h3 cannot reach its SMTP relay (down for 00:01:30: connect: [Errno 111] Connection refused); it claims nothing and probes with backoff: check the relay, its address and credentials'::text)$$,
  'every sender is served by a live runner now; its relay being down is the warning');
SELECT mailroom.runner_gone(worker, run_id) FROM mailroom.runners WHERE worker = 'all-runner';
SELECT results_eq($$SELECT warning FROM mailroom.runner_warnings()$$, $$VALUES ('no_live_runner'::text)$$,
  'a stopped runner''s relay is not a warning, and it serves nothing');

-- A campaign queued a chunk at a time (chunks of 2 here): its mail not
-- queued yet is due too, and counted (queue_stats reads the backlog's count).
CREATE OR REPLACE FUNCTION mailroom._campaign_chunk_size() RETURNS integer
LANGUAGE sql IMMUTABLE SECURITY DEFINER SET search_path = mailroom, pg_temp AS $$ SELECT 2 $$;
SELECT mailroom.upsert_template('rw-news', 'News', 'Hello');
SELECT mailroom.enqueue_campaign('rw-campaign', 'rw-news',
  'SELECT g AS recipient_id, ''rw'' || g || ''@example.org'' AS email FROM generate_series(1, 7) g',
  p_sender => 'bulk', p_send_at => now() - interval '3 minutes');
SELECT results_eq($$SELECT messages, oldest_age FROM mailroom.runner_warnings() WHERE detail LIKE '% of sender bulk %'$$,
  $$VALUES (7::bigint, interval '3 minutes')$$,
  'no_live_runner counts a campaign''s mail not queued yet as due (7, not the chunk of 2)');

SET LOCAL ROLE mailroom_app;
SELECT throws_ok($$SELECT * FROM mailroom.runner_warnings()$$, '42501', 'permission denied for function runner_warnings',
  'apps get 42501');
RESET ROLE;

SELECT * FROM finish();
ROLLBACK;
