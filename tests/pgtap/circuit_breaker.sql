-- pgTAP: the circuit breaker (counting in mark_outcomes and from feedback,
-- tripping per campaign and per sender, the gate, resuming, thresholds).
BEGIN;
SELECT plan(50);

SELECT has_function('mailroom', 'resume_sender', ARRAY['text'], 'resume_sender exists');
SELECT is_definer('mailroom', 'resume_sender', ARRAY['text'], 'resume_sender is SECURITY DEFINER');
SELECT function_privs_are('mailroom', 'resume_sender', ARRAY['text'], 'mailroom_operator', ARRAY['EXECUTE'],
  'operators resume senders');
SELECT function_privs_are('mailroom', 'resume_sender', ARRAY['text'], 'mailroom_app', ARRAY[]::text[],
  'the app does not');
SELECT function_privs_are('mailroom', 'set_breaker_thresholds',
  ARRAY['text', 'integer', 'integer', 'numeric', 'numeric', 'numeric', 'numeric'], 'mailroom_operator', ARRAY['EXECUTE'],
  'operators set the thresholds');
SELECT function_privs_are('mailroom', '_breaker_tally',
  ARRAY['text', 'text', 'integer', 'integer', 'integer', 'timestamp with time zone'], 'mailroom_runner', ARRAY[]::text[],
  'the tally is internal');
SELECT has_view('mailroom', 'breaker_status', 'breaker_status exists');
SELECT function_privs_are('mailroom', 'breaker_fold', ARRAY[]::text[], 'mailroom_operator', ARRAY['EXECUTE'],
  'operators may fold pending counts');
SELECT function_privs_are('mailroom', 'breaker_fold', ARRAY[]::text[], 'mailroom_runner', ARRAY[]::text[],
  'runners do not');

-- Small numbers for a readable test: window 100, sample 20, pause at 5 %.
SELECT lives_ok($$SELECT mailroom.set_breaker_thresholds('campaign', p_window_size => 100, p_min_sample => 20)$$,
  'campaign thresholds set');
SELECT lives_ok($$SELECT mailroom.set_breaker_thresholds('sender', p_window_size => 100, p_min_sample => 20)$$,
  'sender thresholds set');

SELECT mailroom.upsert_template('news', 'News', 'Hello');
CREATE TEMP TABLE c AS
SELECT mailroom.enqueue_campaign('bad list', 'news',
  'SELECT g AS recipient_id, ''r'' || g || ''@example.org'' AS email FROM generate_series(1, 60) g',
  p_send_at => now() - interval '1 second', p_sender => 'bulk') AS id;

-- 18 sent and one hard bounce: 19 delivered, under the minimum sample of 20.
CREATE TEMP TABLE b1 AS SELECT * FROM mailroom.claim_batch('w1', 19);
SELECT is(mailroom.mark_outcomes((SELECT jsonb_agg(jsonb_build_object('id', id, 'token', lease_token,
    'outcome', CASE WHEN n = 1 THEN 'failed' ELSE 'sent' END, 'smtp_code', CASE WHEN n = 1 THEN 550 END,
    'smtp_enhanced', CASE WHEN n = 1 THEN '5.1.1' END))
  FROM (SELECT *, row_number() OVER (ORDER BY id) AS n FROM b1) x)), 19, '18 sent and one 5.1.1 bounce reported');
SELECT results_eq($$SELECT state, delivered, bounced FROM mailroom.breaker_status WHERE scope = 'campaign'$$,
  $$VALUES ('ok', 19.00, 1.00)$$, 'counted: 19 delivered, 1 bounced, under the minimum sample: ok');
SELECT is((SELECT count(*)::int FROM mailroom.breaker_pending), 0, 'the bounce folded the pending delivered mail');
SELECT is((SELECT status FROM mailroom.campaigns WHERE id = (SELECT id FROM c)), 'active', 'not paused under the sample');

-- One more sent (20 delivered, 1 bounced = 5 %) does not evaluate: only a bad event can trip.
CREATE TEMP TABLE b2 AS SELECT * FROM mailroom.claim_batch('w1', 2);
SELECT mailroom.mark_outcome((SELECT id FROM b2 ORDER BY id LIMIT 1), (SELECT lease_token FROM b2 LIMIT 1), 'sent');
SELECT is((SELECT status FROM mailroom.campaigns WHERE id = (SELECT id FROM c)), 'active', 'a delivered mail never trips');
-- The next bounce: 21 delivered, 2 bounced = 9.5 % >= 5 %.
SELECT mailroom.mark_outcome((SELECT id FROM b2 ORDER BY id DESC LIMIT 1), (SELECT lease_token FROM b2 LIMIT 1),
  'failed', 'no such user', 550, '5.1.1');
SELECT is((SELECT status FROM mailroom.campaigns WHERE id = (SELECT id FROM c)), 'paused', 'the bounce paused the campaign');
SELECT results_eq(
  $$SELECT scope, key, delivered, bounced, bounce_rate, reason FROM mailroom.breaker_trips WHERE scope = 'campaign'$$,
  $$VALUES ('campaign', (SELECT id FROM c)::text, 21.00, 2.00, 0.095238,
            'hard-bounce rate 9.52 % >= 5.00 % over the last 21 delivered')$$,
  'the trip is recorded with its figures');
SELECT results_eq($$SELECT state, reason FROM mailroom.breaker_status WHERE scope = 'campaign'$$,
  $$VALUES ('paused', 'hard-bounce rate 9.52 % >= 5.00 % over the last 21 delivered')$$, 'breaker_status says paused and why');
SELECT is((SELECT count(*)::int FROM mailroom.claim_batch('w1', 100)), 0, 'nothing of the paused campaign is claimed');
-- The sender 'bulk' had the same 21 and 2: it tripped too.
SELECT results_eq($$SELECT sender, reason FROM mailroom.sender_pauses$$,
  $$VALUES ('bulk', 'circuit breaker: hard-bounce rate 9.52 % >= 5.00 % over the last 21 delivered')$$,
  'the sender tripped on the same figures');

-- Other senders go on: a transactional mail of 'default' is claimed.
SELECT mailroom.enqueue('ann@example.com', 'Hi', 'text');
SELECT mailroom.enqueue('bob@example.com', 'Hi', 'text', p_sender => 'bulk');
SELECT results_eq($$SELECT to_address FROM mailroom.claim_batch('w1', 100)$$, $$VALUES ('ann@example.com')$$,
  'only the paused sender''s mail is held back; the rest goes');
SELECT results_eq($$SELECT status, status_reason FROM mailroom.queue q JOIN mailroom.contents c USING (id)
                    WHERE c.to_address = 'bob@example.com'$$, $$VALUES ('paused', 'sender_paused')$$,
  'the gate parked the paused sender''s mail');

-- Resume the sender: its parked mail is queued, its counts start afresh.
SET ROLE mailroom_operator;
SELECT is(mailroom.resume_sender('bulk'), 1, 'resume_sender queues its parked mail again');
SELECT is(mailroom.resume_sender('bulk'), 0, 'resuming twice does nothing');
SELECT throws_ok($$SELECT mailroom.resume_sender('')$$, '22023', 'mailroom: sender: must be 1 to 200 characters',
  'resume_sender refuses an empty name');
RESET ROLE;
SELECT is((SELECT count(*)::int FROM mailroom.breaker_status WHERE scope = 'sender' AND key = 'bulk'), 0,
  'the sender''s window starts afresh: nothing counted, nothing shown');
SELECT isnt((SELECT resumed_at FROM mailroom.breaker_trips WHERE scope = 'sender'), NULL, 'its trip is closed');
SELECT results_eq($$SELECT to_address FROM mailroom.claim_batch('w1', 100)$$, $$VALUES ('bob@example.com')$$,
  'the resumed sender''s mail goes');

-- Resume the campaign: fresh window, so the next bounce alone does not trip again.
SELECT is(mailroom.resume_campaign((SELECT id FROM c)) > 0, true, 'resume_campaign queues its mail again');
SELECT is((SELECT count(*)::int FROM mailroom.breaker_status WHERE scope = 'campaign'), 0,
  'the campaign''s window starts afresh');

-- Feedback: a complaint recorded later counts without a delivery, once per event.
SELECT mailroom.set_breaker_thresholds('campaign', p_complaint_pause => 0.05, p_complaint_warn => 0.01);
CREATE TEMP TABLE b3 AS SELECT * FROM mailroom.claim_batch('w1', 30);
SELECT mailroom.mark_outcomes((SELECT jsonb_agg(jsonb_build_object('id', id, 'token', lease_token, 'outcome', 'sent')) FROM b3));
SELECT ok(mailroom.record_feedback('complaint', (SELECT min(id) FROM b3), NULL, NULL, 'abuse report', 'app', 'test:c1'),
  'a complaint is recorded');
SELECT is(mailroom.record_feedback('complaint', (SELECT min(id) FROM b3), NULL, NULL, 'abuse report', 'app', 'test:c1'),
  false, 'the same event again is not');
SELECT results_eq($$SELECT state, delivered, complained, complaint_rate FROM mailroom.breaker_status WHERE scope = 'campaign'$$,
  $$VALUES ('warning', 30.00, 1.00, 0.033333)$$, 'one complaint in 30 (counted once): 3.3 %, a warning');
SELECT mailroom.record_feedback('complaint', (SELECT max(id) FROM b3), NULL, NULL, 'abuse report', 'app', 'test:c2');
SELECT is((SELECT status FROM mailroom.campaigns WHERE id = (SELECT id FROM c)), 'paused', 'the second complaint (6.7 %) pauses');
SELECT is((SELECT reason FROM mailroom.breaker_trips WHERE resumed_at IS NULL AND scope = 'campaign'),
  'complaint rate 6.667 % >= 5.000 % over the last 30 delivered', 'the trip says it was complaints');

-- The window is the last 100 delivered: bounces leave it when 100 more were delivered after them.
SELECT mailroom._breaker_tally('sender', 'roll', 90, 10, 0, now());
SELECT mailroom._breaker_tally('sender', 'roll', 10, 0, 0, now());
SELECT mailroom._breaker_tally('sender', 'roll', 50, 0, 0, now());
SELECT results_eq($$SELECT delivered, bounced FROM mailroom.breaker_status WHERE key = 'roll'$$,
  $$VALUES (100.00, 10.00)$$, '150 delivered: the last 100 still hold the 10 bounces counted at the 90th');
SELECT mailroom._breaker_tally('sender', 'roll', 40, 0, 0, now());
SELECT results_eq($$SELECT delivered, bounced FROM mailroom.breaker_status WHERE key = 'roll'$$,
  $$VALUES (100.00, 0.00)$$, '190 delivered: the window has passed them');
SELECT mailroom._breaker_tally('sender', 'roll', 0, 1, 0, now());
SELECT is((SELECT count(*)::int FROM mailroom.breaker_bad_events WHERE key = 'roll'), 1,
  'the next bad event forgets those the window has passed');

-- Operators read the view (it calls no function they may not execute).
SET ROLE mailroom_operator;
SELECT results_eq($$SELECT delivered, bounced FROM mailroom.breaker_status WHERE key = 'roll'$$,
  $$VALUES (100.00, 1.00)$$, 'mailroom_operator reads breaker_status');
RESET ROLE;

-- Delivered mail waits in breaker_pending until a fold; it counts all the same.
SELECT mailroom.enqueue('f' || g || '@example.net', 'Hi', 'text', p_sender => 'fold') FROM generate_series(1, 10) g;
CREATE TEMP TABLE b4 AS SELECT * FROM mailroom.claim_batch('w1', 10, p_sender => 'fold');
SELECT mailroom.mark_outcomes((SELECT jsonb_agg(jsonb_build_object('id', id, 'token', lease_token, 'outcome', 'sent')) FROM b4));
SELECT results_eq($$SELECT sender, campaign_id, delivered FROM mailroom.breaker_pending$$, $$VALUES ('fold'::text, NULL::bigint, 10)$$,
  'a report of 10 sent (no campaign) is one pending row: its sender, no campaign, 10');
SELECT results_eq($$SELECT delivered FROM mailroom.breaker_status WHERE key = 'fold'$$, $$VALUES (10.00)$$,
  'breaker_status counts pending mail');
SELECT is(mailroom.breaker_fold(), 10::bigint, 'breaker_fold counts the 10');
SELECT results_eq($$SELECT delivered, (SELECT count(*) FROM mailroom.breaker_pending) FROM mailroom.breaker_status
                    WHERE key = 'fold'$$, $$VALUES (10.00, 0::bigint)$$, 'folded, not counted twice');
-- The report whose pending rows pass a multiple of 200 folds what is pending: the backlog stays short without pg_cron.
INSERT INTO mailroom.breaker_pending (sender, delivered) SELECT 'elsewhere', 1 FROM generate_series(1, 200) g;
SELECT setval(pg_get_serial_sequence('mailroom.breaker_pending', 'id'), 1199);  -- the report's row is the 1,200th
SELECT is((SELECT count(*)::int FROM mailroom.breaker_pending), 200, '200 rows pending before the report: none folded them');
SELECT mailroom.enqueue('f11@example.net', 'Hi', 'text', p_sender => 'fold');
CREATE TEMP TABLE b5 AS SELECT * FROM mailroom.claim_batch('w1', 1, p_sender => 'fold');
SELECT mailroom.mark_outcomes((SELECT jsonb_agg(jsonb_build_object('id', id, 'token', lease_token, 'outcome', 'sent')) FROM b5));
SELECT results_eq($$SELECT (SELECT count(*) FROM mailroom.breaker_pending), delivered
                    FROM mailroom.breaker_status WHERE key = 'fold'$$, $$VALUES (0::bigint, 11.00)$$,
  'the report writing the 1,200th row folded all that was pending, its own too');
SELECT results_eq($$SELECT schedule, command FROM cron.job WHERE jobname = 'mailroom-breaker-fold'$$,
  $$VALUES ('* * * * *'::text, 'SELECT mailroom.breaker_fold()'::text)$$, 'pg_cron folds every minute');

-- Bad thresholds.
SELECT throws_ok($$SELECT mailroom.set_breaker_thresholds('stream')$$, '22023',
  'mailroom: scope: must be campaign or sender, got ''stream''', 'an unknown scope is refused');
SELECT throws_ok($$SELECT mailroom.set_breaker_thresholds('sender', p_bounce_pause => 0.01)$$, '22023',
  'mailroom: bounce_warn, bounce_pause: need 0 < warn <= pause <= 1 (fractions: 0.05 is 5 %), got 0.025 and 0.01',
  'a pause rate under the warning rate is refused');
SELECT throws_ok($$SELECT mailroom.set_breaker_thresholds('sender', p_min_sample => 101)$$, '22023',
  'mailroom: min_sample: must be between 1 and window_size (100), got 101', 'a sample larger than the window is refused');

SELECT * FROM finish();
ROLLBACK;
