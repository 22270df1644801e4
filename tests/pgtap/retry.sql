-- Tests for mailroom:retry (retry and retry_campaign)
BEGIN;
SELECT plan(26);
SET LOCAL client_min_messages = warning;
TRUNCATE mailroom.messages CASCADE;
TRUNCATE mailroom.suppressions;

SELECT has_function('mailroom', 'retry', ARRAY['bigint[]', 'timestamp with time zone'], 'retry exists');
SELECT has_function('mailroom', 'retry_campaign', ARRAY['bigint', 'timestamp with time zone'], 'retry_campaign exists');
SELECT is_definer('mailroom', 'retry', ARRAY['bigint[]', 'timestamp with time zone'], 'retry is SECURITY DEFINER');
SELECT is_definer('mailroom', 'retry_campaign', ARRAY['bigint', 'timestamp with time zone'], 'retry_campaign is SECURITY DEFINER');
SELECT function_privs_are('mailroom', 'retry', ARRAY['bigint[]', 'timestamp with time zone'],
  'mailroom_operator', ARRAY['EXECUTE'], 'operators may retry');
SELECT function_privs_are('mailroom', 'retry', ARRAY['bigint[]', 'timestamp with time zone'],
  'mailroom_app', ARRAY[]::text[], 'apps may not retry');
SELECT function_privs_are('mailroom', 'retry_campaign', ARRAY['bigint', 'timestamp with time zone'],
  'mailroom_operator', ARRAY['EXECUTE'], 'operators may retry a campaign');

-- failed (5xx), review (ambiguous), a 5.1.1 bounce (address now suppressed), sent, queued.
SELECT mailroom.enqueue(k || '@example.com', 'Hi', 'B', p_delivery_key => k,
                        p_on_ambiguous => CASE k WHEN 'rev' THEN 'review' ELSE 'retry' END, p_now => '2030-01-01Z')
FROM unnest(ARRAY['fail', 'rev', 'bounce', 'done', 'wait']) AS k;
CREATE TEMP TABLE c AS SELECT * FROM mailroom.claim_batch('w', 4, '1 minute', NULL, '2030-01-01 00:01Z');
SELECT mailroom.mark_outcomes(jsonb_agg(jsonb_build_object('id', id, 'token', lease_token) || CASE delivery_key
         WHEN 'fail' THEN '{"outcome": "failed", "smtp_code": 554}'
         WHEN 'rev' THEN '{"outcome": "ambiguous"}'
         WHEN 'bounce' THEN '{"outcome": "failed", "smtp_code": 550, "smtp_enhanced": "5.1.1"}'
         ELSE '{"outcome": "sent"}' END::jsonb), '2030-01-01 00:02Z') FROM c;
-- Campaign 7 (a real row where the campaigns change is deployed).
DO $$
BEGIN
  IF to_regclass('mailroom.campaigns') IS NOT NULL THEN
    PERFORM mailroom.upsert_template('retry-test', 'S', 'B');
    EXECUTE $i$INSERT INTO mailroom.campaigns (id, name, template_key, send_at) OVERRIDING SYSTEM VALUE
               VALUES (7, 'retry-test', 'retry-test', '2030-01-01Z')$i$;
  END IF;
END
$$;
UPDATE mailroom.messages SET campaign_id = 7, recipient_id = delivery_key;
CREATE TEMP TABLE ids AS SELECT delivery_key AS k, id FROM mailroom.messages;

SELECT results_eq(
  $$SELECT r.previous_status, r.status FROM mailroom.retry(
      ARRAY(SELECT id FROM ids ORDER BY k) || ARRAY[999999, (SELECT id FROM ids WHERE k = 'fail')], '2030-01-01 01:00Z') r
    ORDER BY r.id$$,
  $$VALUES ('failed'::text, 'queued'::text), ('review', 'queued'), ('failed', 'failed'), ('sent', 'sent'),
           ('queued', 'queued'), (NULL, NULL)$$,
  'one row per distinct id: failed and review are queued again; a suppressed address, sent and queued mail are left; unknown ids say NULL');
SELECT results_eq(
  $$SELECT k, status, status_reason, attempts, run_at FROM mailroom.messages JOIN ids USING (id) WHERE k IN ('fail', 'rev') ORDER BY k$$,
  $$VALUES ('fail'::text, 'queued'::text, 'operator retry'::text, 0, '2030-01-01 01:00Z'::timestamptz),
           ('rev', 'queued', 'operator retry', 0, '2030-01-01 01:00Z')$$,
  'retried mail is due now with its attempts reset');
SELECT is((SELECT count(*)::int FROM mailroom.claim_batch('w', 10, '1 minute', NULL, '2030-01-01 01:00Z')), 3,
  'runners claim it again (with the mail that was waiting)');
SELECT is((SELECT most_attempts FROM mailroom.repeated_attempts WHERE recipient = 'fail@example.com'), 2,
  'the ledger still counts both claims although the retry restarted the attempt numbers');

-- By campaign: fail them again first.
SELECT mailroom.mark_outcomes(jsonb_agg(jsonb_build_object('id', id, 'token', lease_token, 'outcome', 'failed')), '2030-01-01 01:01Z')
FROM mailroom.messages WHERE status = 'sending';
SELECT is(mailroom.retry_campaign(7, '2030-01-01 02:00Z'), 3, 'retry_campaign queues the failed mail of the campaign (not the bounced)');
SELECT is(mailroom.retry_campaign(8, '2030-01-01 02:00Z'), 0, 'another campaign: nothing');
SELECT is((SELECT status FROM mailroom.messages JOIN ids USING (id) WHERE k = 'bounce'), 'failed', 'the suppressed one stays failed');

-- Bad input changes nothing.
CREATE TEMP TABLE snap AS SELECT id, status, attempts, run_at FROM mailroom.messages;
SELECT throws_ok($$SELECT * FROM mailroom.retry(NULL)$$, '22023', 'mailroom: ids: at least one message id is required', 'NULL ids');
SELECT throws_ok($$SELECT * FROM mailroom.retry('{}')$$, '22023', 'mailroom: ids: at least one message id is required', 'no ids');
SELECT throws_ok($$SELECT * FROM mailroom.retry(ARRAY[1, NULL])$$, '22023', 'mailroom: ids: must not contain NULL', 'a NULL id');
SELECT throws_ok($$SELECT * FROM mailroom.retry(ARRAY(SELECT generate_series(1, 10001)::bigint))$$, '22023',
  'mailroom: ids: at most 10000 ids per call, got 10001', 'too many ids');
SELECT throws_ok($$SELECT * FROM mailroom.retry(ARRAY[1], NULL)$$, '22023', 'mailroom: now: must not be NULL', 'NULL now');
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

-- Where campaigns are deployed, retried mail of a paused campaign must stay
-- held (message_guard's trigger), whichever way it goes back to the queue.
CREATE TEMP TABLE guard_result (k text, status text);
DO $$
BEGIN
  IF to_regclass('mailroom.campaigns') IS NOT NULL THEN
    PERFORM mailroom.upsert_template('guard-test', 'S', 'B');
    EXECUTE $i$INSERT INTO mailroom.campaigns (id, name, template_key, send_at, status) OVERRIDING SYSTEM VALUE
               VALUES (9, 'guard-test', 'guard-test', '2030-01-01Z', 'paused')$i$;
    INSERT INTO mailroom.messages (delivery_key, status, to_address, template_key, campaign_id, recipient_id, attempts)
    VALUES ('g-failed', 'failed', 'gf@example.com', 'guard-test', 9, 'gf', 5),
           ('g-review', 'review', 'gr@example.com', 'guard-test', 9, 'gr', 1);
    PERFORM mailroom.retry_campaign(9);
    INSERT INTO guard_result SELECT delivery_key, status FROM mailroom.messages WHERE campaign_id = 9;
  END IF;
END
$$;
SELECT CASE WHEN to_regclass('mailroom.campaigns') IS NULL THEN skip('campaigns are not deployed here', 1)
  ELSE results_eq($$SELECT k, status FROM guard_result ORDER BY k$$,
                  $$VALUES ('g-failed'::text, 'paused'::text), ('g-review', 'paused')$$,
                  'retried mail of a paused campaign stays held') END;

SELECT * FROM finish();
ROLLBACK;
