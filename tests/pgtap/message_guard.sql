-- pgTAP: message_guard — mail coming back from a runner respects pause, cancel, deactivation, windows.
BEGIN;
SELECT plan(7);
SET LOCAL timezone = 'UTC';

SELECT has_trigger('mailroom', 'messages', 'messages_guard_requeue', 'the requeue guard exists');

SELECT mailroom.upsert_template('news', 'News', 'Hello');
CREATE TEMP TABLE c AS SELECT mailroom.enqueue_campaign('spring', 'news',
  'SELECT g AS recipient_id, ''r'' || g || ''@example.org'' AS email FROM generate_series(1, 3) g',
  p_now => now() - interval '1 minute') AS id;
CREATE TEMP TABLE b AS SELECT * FROM mailroom.claim_batch('w', 3);
CREATE FUNCTION pg_temp.retry(p_n int) RETURNS int LANGUAGE sql AS $$
  SELECT mailroom.mark_outcomes(jsonb_build_array(jsonb_build_object(
    'id', (SELECT id FROM b ORDER BY id OFFSET p_n LIMIT 1), 'token', (SELECT lease_token FROM b LIMIT 1), 'outcome', 'retry')))
$$;

SELECT mailroom.pause_campaign((SELECT id FROM c));
SELECT pg_temp.retry(0);
SELECT is((SELECT status FROM mailroom.messages WHERE id = (SELECT id FROM b ORDER BY id LIMIT 1)), 'paused',
  'a retry of a paused campaign''s mail is held');
SELECT mailroom.resume_campaign((SELECT id FROM c));
SELECT pg_temp.retry(1);
SELECT is((SELECT status FROM mailroom.messages WHERE id = (SELECT id FROM b ORDER BY id OFFSET 1 LIMIT 1)), 'queued',
  'a retry of an active campaign''s mail is queued');
SELECT mailroom.cancel_campaign((SELECT id FROM c));
SELECT pg_temp.retry(2);
SELECT results_eq($$SELECT status, status_reason FROM mailroom.messages WHERE id = (SELECT id FROM b ORDER BY id OFFSET 2 LIMIT 1)$$,
  $$VALUES ('cancelled', 'campaign_cancelled')$$, 'a retry of a cancelled campaign''s mail is cancelled');

-- schedules: deactivated while in flight; window on retry
SELECT mailroom.schedule_upsert('s1', 'a@example.org', '0 8 * * *', 'Europe/Berlin', 'news', p_window_start => '08:00', p_window_end => '09:00', p_now => '2026-07-01 05:00Z');
SELECT mailroom.schedule_upsert('s2', 'b@example.org', '0 8 * * *', 'Europe/Berlin', 'news', p_now => '2026-07-01 05:00Z');
SELECT mailroom.materialize_schedules('2026-07-01 06:00Z');
CREATE TEMP TABLE b2 AS SELECT * FROM mailroom.claim_batch('w', 10, p_now => '2026-07-01 06:00Z');
SELECT mailroom.schedule_set_active('s2', false, '2026-07-01 06:00:01Z');
UPDATE mailroom.messages SET status = 'queued', run_at = '2026-07-01 07:30Z', lease_token = NULL, leased_until = NULL
WHERE id IN (SELECT id FROM b2);
SELECT results_eq($$SELECT status, coalesce(status_reason, '-') FROM mailroom.messages WHERE to_address = 'b@example.org'$$,
  $$VALUES ('cancelled', 'schedule_inactive')$$, 'a retry of a deactivated schedule''s mail is cancelled');
SELECT is((SELECT run_at FROM mailroom.messages WHERE to_address = 'a@example.org'), '2026-07-02 06:00Z'::timestamptz,
  'a retry due after the window closed (09:30 local) waits for the next opening');

-- other mail is untouched
SELECT mailroom.enqueue('x@example.org', 'S', 'B', p_now => now() - interval '1 minute');
CREATE TEMP TABLE b3 AS SELECT * FROM mailroom.claim_batch('w', 10);
SELECT mailroom.mark_outcomes(jsonb_build_array(jsonb_build_object('id', id, 'token', lease_token, 'outcome', 'retry'))) FROM b3;
SELECT is((SELECT status FROM mailroom.messages WHERE to_address = 'x@example.org'), 'queued', 'plain mail retries as before');

SELECT * FROM finish();
ROLLBACK;
