-- pgTAP: pause_campaign, resume_campaign, cancel_campaign, finish_campaigns, campaign_progress.
BEGIN;
SELECT plan(33);

SELECT has_function('mailroom', 'pause_campaign', ARRAY['bigint'], 'pause_campaign exists');
SELECT has_function('mailroom', 'resume_campaign', ARRAY['bigint'], 'resume_campaign exists');
SELECT has_function('mailroom', 'cancel_campaign', ARRAY['bigint'], 'cancel_campaign exists');
SELECT hasnt_function('mailroom', 'pause_campaign', ARRAY['bigint', 'timestamp with time zone'], 'no p_now on what the app executes');
SELECT function_privs_are('mailroom', 'pause_campaign', ARRAY['bigint'], 'mailroom_app', ARRAY['EXECUTE'], 'the app may pause');
SELECT function_privs_are('mailroom', 'finish_campaigns', ARRAY[]::text[], 'mailroom_operator', ARRAY['EXECUTE'], 'operators may run the housekeeping');
SELECT has_view('mailroom', 'campaign_progress', 'campaign_progress exists');

SELECT mailroom.upsert_template('news', 'News', 'Hello');
CREATE TEMP TABLE c AS
SELECT mailroom.enqueue_campaign('spring', 'news',
  'SELECT g AS recipient_id, ''r'' || g || ''@example.org'' AS email FROM generate_series(1, 6) g',
  p_send_at => now() - interval '1 second') AS id;
GRANT SELECT ON c TO PUBLIC;

-- a runner holds a batch of 2 when the campaign is paused
CREATE TEMP TABLE b1 AS SELECT * FROM mailroom.claim_batch('w1', 2);
SELECT is((SELECT count(*)::int FROM b1), 2, 'a runner claimed 2');
SET ROLE mailroom_app;
SELECT is(mailroom.pause_campaign((SELECT id FROM c)), 4, 'pause holds the 4 queued');
SELECT is(mailroom.pause_campaign((SELECT id FROM c)), 0, 'pausing twice does nothing');
RESET ROLE;
SELECT is((SELECT count(*)::int FROM mailroom.claim_batch('w2', 100)), 0, 'nothing of a paused campaign is claimed');
SELECT results_eq($$SELECT status, queued, paused, sending FROM mailroom.campaign_progress WHERE campaign_id = (SELECT id FROM c)$$,
  $$VALUES ('paused', 0::bigint, 4::bigint, 2::bigint)$$, 'progress: 4 paused, 2 in flight');

-- the batch in flight: one sent, one retry (it comes back queued; claim_batch's gate parks it)
SELECT is(mailroom.mark_outcomes(jsonb_build_array(
  jsonb_build_object('id', (SELECT id FROM b1 ORDER BY id LIMIT 1), 'token', (SELECT lease_token FROM b1 LIMIT 1), 'outcome', 'sent'),
  jsonb_build_object('id', (SELECT id FROM b1 ORDER BY id DESC LIMIT 1), 'token', (SELECT lease_token FROM b1 LIMIT 1), 'outcome', 'retry'))),
  2, 'the batch in flight reports its outcomes');
SELECT is((SELECT count(*)::int FROM mailroom._claim_batch('w2', 100, p_now => now() + interval '2 hours')), 0,
  'its retry is not claimed while the campaign is paused, even once due');
SELECT is((SELECT status FROM mailroom.messages WHERE id = (SELECT id FROM b1 ORDER BY id DESC LIMIT 1)), 'paused',
  'the claim parked it as paused');

SET ROLE mailroom_app;
SELECT is(mailroom.resume_campaign((SELECT id FROM c)), 5, 'resume queues the 5 held again');
SELECT is(mailroom.resume_campaign((SELECT id FROM c)), 0, 'resuming twice does nothing');
RESET ROLE;
CREATE TEMP TABLE b2 AS SELECT * FROM mailroom._claim_batch('w2', 100, p_now => now() + interval '2 hours');
SELECT is((SELECT count(*)::int FROM b2), 5, 'all 5 are claimed after resume (the retry after its backoff)');
SELECT is((SELECT count(DISTINCT delivery_key)::int FROM mailroom.messages WHERE campaign_id = (SELECT id FROM c)), 6,
  'still one message per recipient: nobody twice');

-- done: computed at once by the view, recorded by finish_campaigns
SELECT mailroom.mark_outcomes(jsonb_agg(jsonb_build_object('id', id, 'token', lease_token, 'outcome', 'sent'))) FROM b2;
SELECT results_eq($$SELECT status, sent, sent_last_minute, eta FROM mailroom.campaign_progress WHERE campaign_id = (SELECT id FROM c)$$,
  $$VALUES ('done', 6::bigint, 6::bigint, interval '0')$$, 'progress: done as soon as nothing is left');
SELECT is(mailroom.finish_campaigns(), 1, 'finish_campaigns records it');
SELECT is((SELECT status FROM mailroom.campaigns WHERE id = (SELECT id FROM c)), 'done', 'the campaign is done');

-- cancel
CREATE TEMP TABLE c2 AS
SELECT mailroom.enqueue_campaign('autumn', 'news',
  'SELECT g AS recipient_id, ''r'' || g || ''@example.org'' AS email FROM generate_series(1, 3) g', p_send_at => now() + interval '1 hour') AS id;
GRANT SELECT ON c2 TO PUBLIC;
SELECT results_eq($$SELECT queued, eta, oldest_queued_age FROM mailroom.campaign_progress WHERE campaign_id = (SELECT id FROM c2)$$,
  $$VALUES (3::bigint, NULL::interval, NULL::interval)$$, 'progress of a campaign not yet due');
SELECT mailroom.pause_campaign((SELECT id FROM c2));
SET ROLE mailroom_app;
SELECT is(mailroom.cancel_campaign((SELECT id FROM c2)), 3, 'cancel cancels queued and paused mail');
RESET ROLE;
SELECT is((SELECT count(*)::int FROM mailroom.messages WHERE campaign_id = (SELECT id FROM c2) AND status = 'cancelled'
           AND status_reason = 'campaign_cancelled'), 3, 'with reason campaign_cancelled');

-- A send window holds the rest: 2 of 4 sent this minute, then the window
-- closes (set on the campaign by hand here) and the gate re-times the other
-- two to its next opening, five hours away.
CREATE TEMP TABLE c3 AS
SELECT mailroom.enqueue_campaign('winter', 'news',
  'SELECT g AS recipient_id, ''w'' || g || ''@example.org'' AS email FROM generate_series(1, 4) g',
  p_send_at => now() - interval '1 second') AS id;
GRANT SELECT ON c3 TO PUBLIC;
SELECT mailroom.mark_outcomes(jsonb_agg(jsonb_build_object('id', id, 'token', lease_token, 'outcome', 'sent')))
FROM mailroom.claim_batch('w3', 2);
UPDATE mailroom.campaigns SET time_zone = 'UTC', window_start = (now() AT TIME ZONE 'UTC' + interval '5 hours')::time,
                              window_end = (now() AT TIME ZONE 'UTC' + interval '6 hours')::time
WHERE id = (SELECT id FROM c3);
SELECT is((SELECT count(*)::int FROM mailroom.claim_batch('w3', 10)), 0, 'the closed window holds the other two');
SELECT results_eq($$SELECT sent, queued, due, waiting FROM mailroom.campaign_progress WHERE campaign_id = (SELECT id FROM c3)$$,
  $$VALUES (2::bigint, 2::bigint, 0::bigint, 2::bigint)$$, 'progress: 2 sent, 2 queued, none due, both waiting');
SELECT ok((SELECT next_due_at BETWEEN now() + interval '4 hours 59 minutes' AND now() + interval '5 hours'
                  AND eta >= next_due_at - now()
           FROM mailroom.campaign_progress WHERE campaign_id = (SELECT id FROM c3)),
  'the ETA counts from the window''s opening, five hours away (not 2 mails at 2 a minute: 1 minute)');
SELECT matches((SELECT eta_note FROM mailroom.campaign_progress WHERE campaign_id = (SELECT id FROM c3)),
  '^2 mail\(s\) wait until .* at the latest \(send windows, send_at, retry backoff\)', 'eta_note says what the ETA waits for');

-- bad input
SELECT throws_ok($$SELECT mailroom.pause_campaign(-1)$$, '22023', 'mailroom: campaign: no campaign with id -1', 'unknown campaign');
SELECT throws_ok(format('SELECT mailroom.resume_campaign(%s)', (SELECT id FROM c2)), '55000',
  format('mailroom: campaign: %s is cancelled, only a paused campaign can be resumed', (SELECT id FROM c2)), 'a cancelled campaign stays cancelled');
SELECT throws_ok(format('SELECT mailroom.cancel_campaign(%s)', (SELECT id FROM c)), '55000',
  format('mailroom: campaign: %s is done, nothing is left to cancel', (SELECT id FROM c)), 'a done campaign cannot be cancelled');
SELECT is((SELECT status FROM mailroom.campaigns WHERE id = (SELECT id FROM c2)), 'cancelled', 'nothing changed');

SELECT * FROM finish();
ROLLBACK;
