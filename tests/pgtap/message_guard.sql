-- pgTAP: message_guard — the v0.3 requeue trigger and its function are gone;
-- mail coming back from a runner still respects pause, cancel, deactivation
-- and send windows, because claim_batch's gate decides at claim time. (The
-- race with a decision committed while the retry was in flight is
-- tests/test_gate_campaigns.py.)
BEGIN;
SELECT plan(8);
SET LOCAL timezone = 'UTC';

SELECT hasnt_function('mailroom', '_message_guard', ARRAY[]::text[], 'the requeue guard function is gone');
SELECT is((SELECT count(*)::int FROM pg_trigger WHERE tgname = 'messages_guard_requeue'), 0, 'and so is its trigger');

SELECT mailroom.upsert_template('news', 'News', 'Hello');
CREATE TEMP TABLE c AS SELECT mailroom.enqueue_campaign('spring', 'news',
  'SELECT g AS recipient_id, ''r'' || g || ''@example.org'' AS email FROM generate_series(1, 3) g',
  p_send_at => now() - interval '1 minute') AS id;
CREATE TEMP TABLE b AS SELECT * FROM mailroom.claim_batch('w', 3);
CREATE FUNCTION pg_temp.retry(p_n int) RETURNS int LANGUAGE sql AS $$
  SELECT mailroom.mark_outcomes(jsonb_build_array(jsonb_build_object(
    'id', (SELECT id FROM b ORDER BY id OFFSET p_n LIMIT 1), 'token', (SELECT lease_token FROM b LIMIT 1), 'outcome', 'retry')))
$$;
CREATE FUNCTION pg_temp.claimed(p_n int) RETURNS boolean LANGUAGE sql AS $$
  SELECT EXISTS (SELECT FROM mailroom._claim_batch('w2', 10, p_now => now() + interval '1 day') x
                 WHERE x.id = (SELECT id FROM b ORDER BY id OFFSET p_n LIMIT 1))
$$;

SELECT mailroom.pause_campaign((SELECT id FROM c));
SELECT pg_temp.retry(0);
SELECT is(pg_temp.claimed(0), false, 'a retry of a paused campaign''s mail is not claimed, even once due');
SELECT mailroom.resume_campaign((SELECT id FROM c));
SELECT pg_temp.retry(1);
SELECT is(pg_temp.claimed(1), true, 'a retry of an active campaign''s mail is claimed once due');
SELECT mailroom.cancel_campaign((SELECT id FROM c));
SELECT pg_temp.retry(2);
SELECT is(pg_temp.claimed(2), false, 'a retry of a cancelled campaign''s mail is never claimed');
SELECT results_eq($$SELECT status, status_reason FROM mailroom.messages WHERE id = (SELECT id FROM b ORDER BY id OFFSET 2 LIMIT 1)$$,
  $$VALUES ('cancelled', 'campaign_cancelled')$$, 'the claim finished it as cancelled');

-- schedules: deactivated while in flight; window on retry
SELECT mailroom._schedule_upsert('s1', 'a@example.org', '0 8 * * *', 'Europe/Berlin', 'news', p_window_start => '08:00', p_window_end => '09:00', p_now => '2026-07-01 05:00Z');
SELECT mailroom._schedule_upsert('s2', 'b@example.org', '0 8 * * *', 'Europe/Berlin', 'news', p_now => '2026-07-01 05:00Z');
SELECT mailroom._materialize_schedules(p_now => '2026-07-01 06:00Z');
CREATE TEMP TABLE b2 AS SELECT * FROM mailroom._claim_batch('w', 10, p_now => '2026-07-01 06:00Z');
SELECT mailroom._schedule_set_active('s2', false, '2026-07-01 06:00:01Z');
SELECT mailroom._mark_outcomes(jsonb_agg(jsonb_build_object('id', id, 'token', lease_token, 'outcome', 'retry')), '2026-07-01 06:00:02Z')
FROM b2;
CREATE TEMP TABLE b3 AS SELECT * FROM mailroom._claim_batch('w', 10, p_now => '2026-07-01 07:30Z');
SELECT results_eq($$SELECT status, coalesce(status_reason, '-') FROM mailroom.messages WHERE to_address = 'b@example.org'$$,
  $$VALUES ('cancelled', 'schedule_inactive')$$, 'a retry of a deactivated schedule''s mail is cancelled when it comes due');
SELECT is((SELECT run_at FROM mailroom.messages WHERE to_address = 'a@example.org'), '2026-07-02 06:00Z'::timestamptz,
  'a retry due after the window closed (09:30 local) waits for the next opening');

SELECT * FROM finish();
ROLLBACK;
