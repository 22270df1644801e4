-- Tests for mailroom:retry (retry and retry_campaign)
BEGIN;
SELECT plan(26);
SET LOCAL client_min_messages = warning;
TRUNCATE mailroom.queue, mailroom.contents, mailroom.attempts, mailroom.campaigns CASCADE;
TRUNCATE mailroom.suppressions;

SELECT has_function('mailroom', 'retry', ARRAY['bigint[]'], 'retry exists');
SELECT has_function('mailroom', 'retry_campaign', ARRAY['bigint'], 'retry_campaign exists');
SELECT is_definer('mailroom', 'retry', ARRAY['bigint[]'], 'retry is SECURITY DEFINER');
SELECT is_definer('mailroom', 'retry_campaign', ARRAY['bigint'], 'retry_campaign is SECURITY DEFINER');
SELECT function_privs_are('mailroom', 'retry', ARRAY['bigint[]'],
  'mailroom_operator', ARRAY['EXECUTE'], 'operators may retry');
SELECT function_privs_are('mailroom', 'retry', ARRAY['bigint[]'],
  'mailroom_app', ARRAY[]::text[], 'apps may not retry');
SELECT function_privs_are('mailroom', 'retry_campaign', ARRAY['bigint'],
  'mailroom_operator', ARRAY['EXECUTE'], 'operators may retry a campaign');

-- failed (5xx), review (ambiguous), a 5.1.1 bounce (address now suppressed), sent, queued.
SELECT mailroom.enqueue(k || '@example.com', 'Hi', 'B', p_delivery_key => k,
                        p_on_ambiguous => CASE k WHEN 'rev' THEN 'review' ELSE 'retry' END, p_send_at => '2030-01-01Z')
FROM unnest(ARRAY['fail', 'rev', 'bounce', 'done', 'wait']) AS k;
CREATE TEMP TABLE c AS SELECT * FROM mailroom._claim_batch('w', 4, '1 minute', NULL, '2030-01-01 00:01Z');
SELECT mailroom._mark_outcomes(jsonb_agg(jsonb_build_object('id', id, 'token', lease_token) || CASE delivery_key
         WHEN 'fail' THEN '{"outcome": "failed", "smtp_code": 554}'
         WHEN 'rev' THEN '{"outcome": "ambiguous"}'
         WHEN 'bounce' THEN '{"outcome": "failed", "smtp_code": 550, "smtp_enhanced": "5.1.1"}'
         ELSE '{"outcome": "sent"}' END::jsonb), '2030-01-01 00:02Z') FROM c;
-- Campaign 7: the mail becomes its mail (test setup, as superuser).
SELECT mailroom.upsert_template('retry-test', 'S', 'B');
INSERT INTO mailroom.campaigns (id, name, template_key, send_at) OVERRIDING SYSTEM VALUE
VALUES (7, 'retry-test', 'retry-test', '2030-01-01Z');
UPDATE mailroom.contents SET campaign_id = 7, recipient_id = delivery_key;
CREATE TEMP TABLE ids AS SELECT delivery_key AS k, id FROM mailroom.contents;

SELECT results_eq(
  $$SELECT r.previous_status, r.status, split_part(r.not_retried_because, ' (', 1) FROM mailroom.retry(
      ARRAY(SELECT id FROM ids ORDER BY k) || ARRAY[999999, (SELECT id FROM ids WHERE k = 'fail')]) r
    ORDER BY r.id$$,
  $$VALUES ('failed'::text, 'queued'::text, NULL::text), ('review', 'queued', NULL), ('failed', 'failed', 'the address is suppressed'),
           ('sent', 'sent', 'it is sent: only failed or review mail is retried'),
           ('queued', 'queued', 'it is queued: only failed or review mail is retried'), (NULL, NULL, 'no such message')$$,
  'one row per distinct id: failed and review are queued again; a suppressed address, sent and queued mail are left; unknown ids say NULL; not_retried_because says why');
SELECT results_eq(
  $$SELECT k, status, status_reason, attempts, run_at = now(), finished_at FROM mailroom.messages JOIN ids USING (id) WHERE k IN ('fail', 'rev') ORDER BY k$$,
  $$VALUES ('fail'::text, 'queued'::text, 'operator retry'::text, 0, true, NULL::timestamptz),
           ('rev', 'queued', 'operator retry', 0, true, NULL)$$,
  'retried mail is due now with its attempts reset');
SELECT is((SELECT count(*)::int FROM mailroom._claim_batch('w', 10, '1 minute', NULL, '2030-01-01 01:00Z')), 3,
  'runners claim it again (with the mail that was waiting)');
SELECT results_eq($$SELECT outcome, finished_as FROM mailroom.attempts WHERE message_id = (SELECT id FROM ids WHERE k = 'fail')$$,
  $$VALUES ('failed'::text, NULL::text)$$,
  'the failed attempt stays in the ledger, no longer the finishing row (the mail is live again)');

-- By campaign: fail them again first.
SELECT mailroom._mark_outcomes(jsonb_agg(jsonb_build_object('id', id, 'token', lease_token, 'outcome', 'failed')), '2030-01-01 01:01Z')
FROM mailroom.messages WHERE status = 'sending';
SELECT is(mailroom.retry_campaign(7), 3, 'retry_campaign queues the failed mail of the campaign (not the bounced)');
SELECT is(mailroom.retry_campaign(8), 0, 'another campaign: nothing');
SELECT is((SELECT status FROM mailroom.messages JOIN ids USING (id) WHERE k = 'bounce'), 'failed', 'the suppressed one stays failed');

-- Bad input changes nothing.
CREATE TEMP TABLE snap AS SELECT id, status, attempts, run_at FROM mailroom.messages;
SELECT throws_ok($$SELECT * FROM mailroom.retry(NULL)$$, '22023', 'mailroom: ids: at least one message id is required', 'NULL ids');
SELECT throws_ok($$SELECT * FROM mailroom.retry('{}')$$, '22023', 'mailroom: ids: at least one message id is required', 'no ids');
SELECT throws_ok($$SELECT * FROM mailroom.retry(ARRAY[1, NULL])$$, '22023', 'mailroom: ids: must not contain NULL', 'a NULL id');
SELECT throws_ok($$SELECT * FROM mailroom.retry(ARRAY(SELECT generate_series(1, 10001)::bigint))$$, '22023',
  'mailroom: ids: at most 10000 ids per call, got 10001', 'too many ids');
SELECT throws_ok($$SELECT mailroom.retry_campaign(NULL)$$, '22023', 'mailroom: campaign_id: must be a positive campaign id, got NULL', 'NULL campaign');
SELECT throws_ok($$SELECT mailroom.retry_campaign(0)$$, '22023', 'mailroom: campaign_id: must be a positive campaign id, got 0', 'campaign 0');
SELECT results_eq($$SELECT id, status, attempts, run_at FROM mailroom.messages ORDER BY id$$,
  $$SELECT * FROM snap ORDER BY id$$, 'bad input changed nothing');

SET LOCAL ROLE mailroom_operator;
SELECT is((SELECT count(*)::int FROM mailroom.retry(ARRAY[(SELECT 1::bigint)])), 1, 'an operator calls retry');
RESET ROLE;
SET LOCAL ROLE mailroom_app;
SELECT throws_ok($$SELECT * FROM mailroom.retry(ARRAY[1])$$, '42501', 'permission denied for function retry', 'apps get 42501');
RESET ROLE;
SET LOCAL ROLE mailroom_runner;
SELECT throws_ok($$SELECT mailroom.retry_campaign(7)$$, '42501', 'permission denied for function retry_campaign', 'runners get 42501');
RESET ROLE;

-- Retried mail of a paused campaign is held as paused, whichever way it goes
-- back to the queue (failed: finished; review: live).
SELECT mailroom.upsert_template('guard-test', 'S', 'B');
INSERT INTO mailroom.campaigns (id, name, template_key, send_at, status) OVERRIDING SYSTEM VALUE
VALUES (9, 'guard-test', 'guard-test', '2030-01-01Z', 'paused');
WITH content AS (
  INSERT INTO mailroom.contents (delivery_key, to_address, template_key, campaign_id, recipient_id)
  VALUES ('g-failed', 'gf@example.com', 'guard-test', 9, 'gf'), ('g-review', 'gr@example.com', 'guard-test', 9, 'gr')
  RETURNING id, delivery_key, campaign_id
),
live AS (
  INSERT INTO mailroom.queue (id, status, sender, campaign_id, attempts, max_attempts, on_ambiguous)
  SELECT id, 'review', 'default', campaign_id, 1, 5, 'review' FROM content WHERE delivery_key = 'g-review'
)
INSERT INTO mailroom.attempts (message_id, attempt, finished_at, outcome, finished_as)
SELECT id, 5, now(), 'failed', 'failed' FROM content WHERE delivery_key = 'g-failed';
SELECT is(mailroom.retry_campaign(9), 2, 'retry_campaign of a paused campaign moves both');
SELECT results_eq($$SELECT delivery_key, status FROM mailroom.messages WHERE campaign_id = 9 ORDER BY 1$$,
                  $$VALUES ('g-failed'::text, 'paused'::text), ('g-review', 'paused')$$,
                  'retried mail of a paused campaign stays held');

SELECT * FROM finish();
ROLLBACK;
