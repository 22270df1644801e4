-- Tests for mailroom:mark_outcomes (and mark_outcome, which forwards to it)
BEGIN;
SELECT plan(82);
SET LOCAL client_min_messages = warning;
TRUNCATE mailroom.queue, mailroom.contents, mailroom.attempts;
TRUNCATE mailroom.suppressions;
UPDATE mailroom.settings SET value = '10 seconds' WHERE key = 'retry_backoff_base';

SELECT has_function('mailroom', 'mark_outcomes', ARRAY['jsonb'], 'mark_outcomes exists');
SELECT has_function('mailroom', 'mark_outcome',
  ARRAY['bigint', 'uuid', 'text', 'text', 'integer', 'text', 'text'], 'mark_outcome exists');
SELECT hasnt_function('mailroom', 'mark_outcomes', ARRAY['jsonb', 'timestamp with time zone'],
  'the v0.3 mark_outcomes with p_now is gone');
SELECT is_definer('mailroom', 'mark_outcomes', ARRAY['jsonb'], 'mark_outcomes is SECURITY DEFINER');
SELECT is_definer('mailroom', 'mark_outcome',
  ARRAY['bigint', 'uuid', 'text', 'text', 'integer', 'text', 'text'], 'mark_outcome is SECURITY DEFINER');
SELECT ok((SELECT proconfig @> ARRAY['enable_seqscan=off', 'plan_cache_mode=force_generic_plan']
            FROM pg_proc WHERE oid = 'mailroom._mark_outcomes(jsonb, timestamptz)'::regprocedure),
  'mark_outcomes plans once per session, without sequential scans (no stale plan scans the ledger)');
SELECT function_privs_are('mailroom', 'mark_outcomes', ARRAY['jsonb'],
  'mailroom_runner', ARRAY['EXECUTE'], 'runners may report outcomes');
SELECT function_privs_are('mailroom', 'mark_outcomes', ARRAY['jsonb'],
  'mailroom_app', ARRAY[]::text[], 'apps may not report outcomes');
SELECT function_privs_are('mailroom', '_mark_outcomes', ARRAY['jsonb', 'timestamp with time zone'],
  'mailroom_runner', ARRAY[]::text[], 'runners may not pin the clock');

SELECT mailroom.enqueue(k || '@example.com', 'Hi', 'B', p_delivery_key => k, p_max_attempts => 2,
                        p_on_ambiguous => CASE WHEN k = 'amb-review' THEN 'review' ELSE 'retry' END,
                        p_send_at => '2030-01-01 00:00Z')
FROM unnest(ARRAY['ok', 'soft', 'hard', 'bounce', 'amb-retry', 'amb-review']) AS k;
SELECT mailroom.enqueue('bounce@EXAMPLE.com', 'Other', 'B', p_delivery_key => 'bounce-later', p_send_at => '2030-02-01Z');
CREATE TEMP TABLE c AS SELECT * FROM mailroom._claim_batch('w1', 6, '5 minutes', NULL, '2030-01-01 00:01Z');

SELECT is(mailroom._mark_outcomes(
  (SELECT jsonb_agg(jsonb_build_object('id', id, 'token', lease_token) || CASE delivery_key
     WHEN 'ok'         THEN '{"outcome": "sent", "smtp_code": 250, "detail": "2.0.0 queued as A1", "provider_id": "A1"}'
     WHEN 'soft'       THEN '{"outcome": "retry", "smtp_code": 451, "smtp_enhanced": "4.7.1", "detail": "try later"}'
     WHEN 'hard'       THEN '{"outcome": "failed", "smtp_code": 554, "smtp_enhanced": "5.7.1", "detail": "rejected"}'
     WHEN 'bounce'     THEN '{"outcome": "failed", "smtp_code": 550, "smtp_enhanced": "5.1.1", "detail": "no such user"}'
     ELSE '{"outcome": "ambiguous", "detail": "timeout after DATA"}' END::jsonb)
   FROM c)::jsonb, '2030-01-01 00:02Z'), 6, 'six outcomes applied in one call');

SELECT results_eq($$SELECT status, sent_at, lease_token FROM mailroom.messages WHERE delivery_key = 'ok'$$,
  $$VALUES ('sent'::text, '2030-01-01 00:02Z'::timestamptz, NULL::uuid)$$, 'sent: sent_at set, lease cleared');
SELECT is_empty($$SELECT FROM mailroom.queue q JOIN c USING (id) WHERE c.delivery_key IN ('ok', 'hard', 'bounce')$$,
  'final outcomes leave the hot queue');
SELECT results_eq($$SELECT a.finished_as, a.status_reason FROM mailroom.attempts a JOIN c ON c.id = a.message_id
                    WHERE a.finished_as IS NOT NULL ORDER BY c.delivery_key$$,
  $$VALUES ('failed'::text, 'permanent failure'::text), ('failed', 'permanent failure'), ('sent', NULL)$$,
  '... and their attempt''s ledger row is the finishing row (bounce, hard, ok)');
SELECT results_eq($$SELECT status, status_reason, last_error FROM mailroom.messages WHERE delivery_key = 'soft'$$,
  $$VALUES ('queued'::text, 'retry'::text, '451 4.7.1 try later'::text)$$, 'retry: back to queued with the SMTP reply');
SELECT ok((SELECT run_at BETWEEN '2030-01-01 00:02:05Z' AND '2030-01-01 00:02:10Z' FROM mailroom.messages WHERE delivery_key = 'soft'),
  'retry: run_at pushed back by the jittered base delay (5 to 10 s after 1 attempt)');
SELECT results_eq($$SELECT status, status_reason FROM mailroom.messages WHERE delivery_key = 'hard'$$,
  $$VALUES ('failed'::text, 'permanent failure'::text)$$, 'failed: permanent');
SELECT results_eq($$SELECT reason, address FROM mailroom.suppressions$$,
  $$VALUES ('hard_bounce'::text, 'bounce@example.com'::text)$$, 'a 5.1.x failure suppresses the address (and only that one)');
SELECT is((SELECT status FROM mailroom.messages WHERE delivery_key = 'amb-retry'), 'queued', 'ambiguous + retry policy: queued again');
SELECT is((SELECT status FROM mailroom.messages WHERE delivery_key = 'amb-review'), 'review', 'ambiguous + review policy: held for review');
SELECT results_eq(
  $$SELECT m.delivery_key, a.reported, a.outcome, a.smtp_code::int, a.smtp_enhanced, a.provider_id, a.finished_at
    FROM mailroom.attempts a JOIN mailroom.messages m ON m.id = a.message_id
    WHERE m.delivery_key IN ('ok', 'bounce') ORDER BY m.delivery_key$$,
  $$VALUES ('bounce'::text, 'failed'::text, 'failed'::text, 550, '5.1.1'::text, NULL::text, '2030-01-01 00:02Z'::timestamptz),
           ('ok', 'sent', 'sent', 250, NULL, 'A1', '2030-01-01 00:02Z')$$,
  'the ledger records code, enhanced code and provider id');

-- A batch whose reports all say sent (nearly every one) is applied by its own
-- lean statement: the same ledger rows, every field of the report kept.
SELECT mailroom.enqueue(k || '@example.com', 'Hi', 'B', p_delivery_key => k, p_priority => 10,
                        p_send_at => '2030-01-01 00:00Z')
FROM unnest(ARRAY['lean-1', 'lean-2']) AS k;
CREATE TEMP TABLE c_lean AS SELECT * FROM mailroom._claim_batch('w1', 2, '5 minutes', NULL, '2030-01-01 00:03Z');
SELECT is(mailroom._mark_outcomes(
  (SELECT jsonb_agg(jsonb_build_object('id', id, 'token', lease_token, 'outcome', 'sent', 'smtp_code', 250,
                                       'smtp_enhanced', '2.0.0', 'detail', 'queued as L' || right(delivery_key, 1),
                                       'provider_id', 'L' || right(delivery_key, 1)))
   FROM c_lean), '2030-01-01 00:04Z'), 2, 'an all-sent batch applies');
SELECT results_eq(
  $$SELECT t.delivery_key, a.attempt, a.worker, a.reported, a.outcome, a.smtp_code::int, a.smtp_enhanced, a.smtp_text,
           a.provider_id, a.duplicate, a.finished_as, a.status_reason, a.claimed_at, a.finished_at, a.reported_at
    FROM mailroom.attempts a JOIN mailroom.contents t ON t.id = a.message_id
    WHERE t.delivery_key LIKE 'lean-%' ORDER BY 1$$,
  $$VALUES ('lean-1'::text, 1, 'w1'::text, 'sent'::text, 'sent'::text, 250, '2.0.0'::text, 'queued as L1'::text, 'L1'::text,
            false, 'sent'::text, NULL::text, '2030-01-01 00:03Z'::timestamptz, '2030-01-01 00:04Z'::timestamptz,
            '2030-01-01 00:04Z'::timestamptz),
           ('lean-2', 1, 'w1', 'sent', 'sent', 250, '2.0.0', 'queued as L2', 'L2', false, 'sent', NULL,
            '2030-01-01 00:03Z', '2030-01-01 00:04Z', '2030-01-01 00:04Z')$$,
  '... its ledger rows are the finishing rows, with every field the reports gave');
SELECT is_empty($$SELECT FROM mailroom.queue q JOIN c_lean USING (id)$$, '... and the mail left the hot queue');

-- Retry until attempts are spent.
CREATE TEMP TABLE c2 AS SELECT * FROM mailroom._claim_batch('w1', 10, '5 minutes', NULL, '2030-01-01 01:00Z') WHERE delivery_key <> 'bounce-later';
SELECT results_eq($$SELECT delivery_key, attempt FROM c2 ORDER BY delivery_key$$,
  $$VALUES ('amb-retry'::text, 2), ('soft', 2)$$, 'retried mail is claimed again once due');
SELECT ok(mailroom._mark_outcome(id, lease_token, 'retry', 'still busy', 421, '4.4.2', NULL, '2030-01-01 01:01Z'),
  'mark_outcome applies one outcome') FROM c2 WHERE delivery_key = 'soft';
SELECT results_eq($$SELECT status, status_reason FROM mailroom.messages WHERE delivery_key = 'soft'$$,
  $$VALUES ('failed'::text, 'attempts exhausted'::text)$$, 'a retry on the last attempt fails the message');

-- A stale token changes nothing but the ledger.
SELECT is(mailroom._mark_outcomes(jsonb_build_array(jsonb_build_object('id', id, 'token', gen_random_uuid(), 'outcome', 'sent')),
  '2030-01-01 01:02Z'), 0, 'an unknown token applies nothing') FROM c2 WHERE delivery_key = 'amb-retry';
SELECT is((SELECT status FROM mailroom.messages WHERE delivery_key = 'amb-retry'), 'sending', 'the live claim is untouched');

-- A late "sent" under a lost lease settles a review row; a repeat is a no-op.
SELECT is(mailroom._mark_outcomes(jsonb_build_array(jsonb_build_object('id', id, 'token', lease_token, 'outcome', 'sent')),
  '2030-01-01 01:03Z'), 0, 'a late outcome is not counted as applied') FROM c WHERE delivery_key = 'amb-review';
SELECT is((SELECT status FROM mailroom.messages WHERE delivery_key = 'amb-review'), 'review',
  'a review row whose attempt already reported stays in review');
-- Its lease runs out at 01:05 and reclaim, at 01:05:30, holds it for review.
UPDATE mailroom.queue SET on_ambiguous = 'review' WHERE id = (SELECT id FROM mailroom.contents WHERE delivery_key = 'amb-retry');
SELECT is(mailroom._reclaim(10000, '2030-01-01 01:05:30Z'), 1, 'reclaim ends the expired lease');
SELECT results_eq($$SELECT reported, outcome, finished_at FROM mailroom.attempts a JOIN c2 ON c2.id = a.message_id AND c2.lease_token = a.lease_token
                    WHERE c2.delivery_key = 'amb-retry'$$,
  $$VALUES (NULL::text, 'expired'::text, '2030-01-01 01:05:30Z'::timestamptz)$$,
  'reclaim writes the expired attempt to the ledger');
SELECT mailroom._mark_outcomes(jsonb_build_array(jsonb_build_object('id', id, 'token', lease_token, 'outcome', 'sent')), '2030-01-01 01:06Z')
FROM c2 WHERE delivery_key = 'amb-retry';
SELECT results_eq($$SELECT status, status_reason FROM mailroom.messages WHERE delivery_key = 'amb-retry'$$,
  $$VALUES ('sent'::text, 'late outcome'::text)$$, 'a late sent for an expired attempt settles a review row as sent');
SELECT results_eq($$SELECT reported, outcome, finished_at, reported_at FROM mailroom.attempts a JOIN c2 ON c2.id = a.message_id AND c2.lease_token = a.lease_token
                    WHERE c2.delivery_key = 'amb-retry'$$,
  $$VALUES ('sent'::text, 'stale'::text, '2030-01-01 01:05:30Z'::timestamptz, '2030-01-01 01:06Z'::timestamptz)$$,
  'the ledger shows the late report as stale, keeping the expiry time');

-- A second successful send of one mail is recorded and flagged: a mail a
-- late report settled as sent is put back by hand (as an operator's retry
-- would) and sent again.
INSERT INTO mailroom.queue (id, run_at, sender, attempts, max_attempts, on_ambiguous, updated_at)
SELECT c.id, '2030-01-01Z', c.sender, 2, 5, 'retry', '2030-01-01 02:00Z' FROM mailroom.contents c WHERE c.delivery_key = 'amb-retry';
UPDATE mailroom.attempts SET finished_as = NULL, finish_key = id WHERE message_id = (SELECT id FROM mailroom.contents WHERE delivery_key = 'amb-retry') AND finished_as IS NOT NULL;
CREATE TEMP TABLE c3 AS SELECT * FROM mailroom._claim_batch('w2', 1, '5 minutes', NULL, '2030-01-01 02:00Z');
SELECT is((SELECT attempt FROM c3), 3, 'the third attempt of amb-retry is claimed');
SELECT mailroom._mark_outcomes(jsonb_build_array(jsonb_build_object('id', id, 'token', lease_token, 'outcome', 'sent')), '2030-01-01 02:01Z') FROM c3;
SELECT results_eq($$SELECT count(*)::int, count(*) FILTER (WHERE duplicate)::int FROM mailroom.attempts a
                    JOIN mailroom.contents m ON m.id = a.message_id WHERE m.delivery_key = 'amb-retry' AND a.reported = 'sent'$$,
  $$VALUES (2, 1)$$, 'two successful attempts of one key: the second is flagged duplicate');
-- An operator's retry resets the attempt count (retry, resolve_review): the
-- next success is attempt 1 again, and still flagged.
INSERT INTO mailroom.queue (id, run_at, sender, attempts, max_attempts, on_ambiguous, status_reason, updated_at)
SELECT c.id, '2030-01-01Z', c.sender, 0, 5, 'retry', 'operator retry', '2030-01-01 02:10Z' FROM mailroom.contents c WHERE c.delivery_key = 'amb-retry';
UPDATE mailroom.attempts SET finished_as = NULL, finish_key = id WHERE message_id = (SELECT id FROM mailroom.contents WHERE delivery_key = 'amb-retry') AND finished_as IS NOT NULL;
CREATE TEMP TABLE c4 AS SELECT * FROM mailroom._claim_batch('w3', 1, '5 minutes', NULL, '2030-01-01 02:10Z');
SELECT mailroom._mark_outcomes(jsonb_build_array(jsonb_build_object('id', id, 'token', lease_token, 'outcome', 'sent')), '2030-01-01 02:11Z') FROM c4;
SELECT results_eq($$SELECT a.attempt, a.duplicate FROM mailroom.attempts a JOIN c4 ON c4.id = a.message_id AND c4.lease_token = a.lease_token$$,
  $$VALUES (1, true)$$, 'a success after an operator''s retry (attempt 1 again) is flagged duplicate too');

-- Other mail to a hard-bounced address meets the gate.
SELECT is((SELECT count(*)::int FROM mailroom._claim_batch('w9', 10, '1 minute', NULL, '2030-02-01 00:00:01Z') WHERE delivery_key = 'bounce-later'), 0,
  'other mail to a hard-bounced address is never claimed ...');
SELECT results_eq($$SELECT status, status_reason FROM mailroom.messages WHERE delivery_key = 'bounce-later'$$,
  $$VALUES ('cancelled'::text, 'suppressed'::text)$$, '... the gate cancels it');

-- Bad input: refused whole, nothing written. (Two mails with live leases:
-- a report of them that the lean statement applies is undone with the
-- rest of the call when another report of the batch is refused.)
SELECT mailroom.enqueue('undo' || g || '@example.com', 'Hi', 'B', p_delivery_key => 'lean-undo-' || g,
                        p_send_at => '2030-03-01Z', p_sender => 'undo')
FROM generate_series(1, 2) g;
CREATE TEMP TABLE undo AS SELECT * FROM mailroom._claim_batch('w-undo', 2, '5 minutes', 'undo', '2030-03-01 00:01Z');
CREATE TEMP TABLE before_errors AS SELECT (SELECT count(*) FROM mailroom.attempts WHERE reported IS NOT NULL) AS reported,
  (SELECT string_agg(status, ',' ORDER BY id) FROM mailroom.messages) AS statuses;
SELECT throws_ok($$SELECT mailroom.mark_outcomes('{"id": 1}')$$, '22023',
  'mailroom: results: must be a JSON array of outcome objects', 'not an array (the public function)');
SELECT throws_ok($$SELECT mailroom.mark_outcomes('[42]')$$, '22023', 'mailroom: results[0]: must be an object', 'element not an object');
SELECT throws_ok($$SELECT mailroom.mark_outcomes('[{"token": "6f1c1a3e-2b1a-4a55-8f1e-7d6c1c1a3e2b", "outcome": "sent"}]')$$, '22023',
  'mailroom: results[0].id: missing', 'missing id');
SELECT throws_ok($$SELECT mailroom.mark_outcomes('[{"id": "7", "token": "6f1c1a3e-2b1a-4a55-8f1e-7d6c1c1a3e2b", "outcome": "sent"}]')$$, '22023',
  'mailroom: results[0].id: must be a positive integer', 'id of the wrong type');
SELECT throws_ok($$SELECT mailroom.mark_outcomes('[{"id": 1, "outcome": "sent"}]')$$, '22023',
  'mailroom: results[0].token: missing', 'missing token');
SELECT throws_ok($$SELECT mailroom.mark_outcomes('[{"id": 1, "token": 5, "outcome": "sent"}]')$$, '22023',
  'mailroom: results[0].token: must be a UUID string', 'token of the wrong type');
-- The id and token checks spell the patterns without bounded repetitions
-- (cheaper): strings that are nearly right are still refused.
SELECT throws_ok($$SELECT mailroom.mark_outcomes('[{"id": 1, "token": "6f1c1a3e-2b1a-4a55-8f1e-7d6c1c1a3e2g", "outcome": "sent"}]')$$, '22023',
  'mailroom: results[0].token: must be a UUID string', 'a token of 36 characters with one that is not hex');
SELECT throws_ok($$SELECT mailroom.mark_outcomes('[{"id": 1, "token": "6f1c1a3e2-b1a-4a55-8f1e-7d6c1c1a3e2b", "outcome": "sent"}]')$$, '22023',
  'mailroom: results[0].token: must be a UUID string', 'a token with a hyphen out of place');
SELECT throws_ok($$SELECT mailroom.mark_outcomes('[{"id": 1234567890123456789, "token": "6F1C1A3E-2B1A-4A55-8F1E-7D6C1C1A3E2B", "outcome": "sent"}]')$$, '22023',
  'mailroom: results[0].id: must be a positive integer', 'an id of 19 digits (an upper-case token is fine)');
SELECT throws_ok(format($$SELECT mailroom.mark_outcomes('[%s, {"id": 2, "token": "6f1c1a3e-2b1a-4a55-8f1e-7d6c1c1a3e2b", "outcome": "delivered"}]')$$,
    jsonb_build_object('id', id, 'token', lease_token, 'outcome', 'sent'))::text, '22023',
  'mailroom: results[1].outcome: unknown outcome "delivered" (expected sent, retry, failed or ambiguous)',
  'unknown outcome word; the valid element before it is not applied either') FROM c3;
SELECT throws_ok($$SELECT mailroom.mark_outcomes('[{"id": 1, "token": "6f1c1a3e-2b1a-4a55-8f1e-7d6c1c1a3e2b", "outcome": "failed", "smtp_code": "550"}]')$$, '22023',
  'mailroom: results[0].smtp_code: must be a number from 200 to 599', 'smtp_code of the wrong type');
SELECT throws_ok($$SELECT mailroom.mark_outcomes('[{"id": 1, "token": "6f1c1a3e-2b1a-4a55-8f1e-7d6c1c1a3e2b", "outcome": "sent"}, {"id": 1, "token": "6f1c1a3e-2b1a-4a55-8f1e-7d6c1c1a3e2b", "outcome": "failed"}]')$$, '22023',
  'mailroom: results: id 1 appears more than once', 'the same id twice');
-- Each element the per-element check refuses is refused with its message,
-- also where the whole-batch tests in front of it cannot tell (1.0, 550.0,
-- a missing key, a nested array): after a valid element, so at index 1.
SELECT throws_ok($$SELECT mailroom.mark_outcomes('[{"id": 2, "token": "6f1c1a3e-2b1a-4a55-8f1e-7d6c1c1a3e2b", "outcome": "sent"}, {"id": 1.0, "token": "6f1c1a3e-2b1a-4a55-8f1e-7d6c1c1a3e2b", "outcome": "sent"}]')$$, '22023',
  'mailroom: results[1].id: must be a positive integer', 'an id written 1.0');
SELECT throws_ok($$SELECT mailroom.mark_outcomes('[{"id": 2, "token": "6f1c1a3e-2b1a-4a55-8f1e-7d6c1c1a3e2b", "outcome": "sent"}, {"id": -1, "token": "6f1c1a3e-2b1a-4a55-8f1e-7d6c1c1a3e2b", "outcome": "sent"}]')$$, '22023',
  'mailroom: results[1].id: must be a positive integer', 'a negative id');
SELECT throws_ok($$SELECT mailroom.mark_outcomes('[{"id": 2, "token": "6f1c1a3e-2b1a-4a55-8f1e-7d6c1c1a3e2b", "outcome": "sent"}, {"id": 1e18, "token": "6f1c1a3e-2b1a-4a55-8f1e-7d6c1c1a3e2b", "outcome": "sent"}]')$$, '22023',
  'mailroom: results[1].id: must be a positive integer', 'an id of 1e18 (19 digits)');
SELECT throws_ok($$SELECT mailroom.mark_outcomes('[{"id": 2, "token": "6f1c1a3e-2b1a-4a55-8f1e-7d6c1c1a3e2b", "outcome": "sent"}, {"id": null, "token": "6f1c1a3e-2b1a-4a55-8f1e-7d6c1c1a3e2b", "outcome": "sent"}]')$$, '22023',
  'mailroom: results[1].id: must be a positive integer', 'a null id');
SELECT throws_ok($$SELECT mailroom.mark_outcomes('[{"id": 2, "token": "6f1c1a3e-2b1a-4a55-8f1e-7d6c1c1a3e2b", "outcome": "sent"}, {"id": 1, "token": null, "outcome": "sent"}]')$$, '22023',
  'mailroom: results[1].token: must be a UUID string', 'a null token');
SELECT throws_ok($$SELECT mailroom.mark_outcomes('[{"id": 2, "token": "6f1c1a3e-2b1a-4a55-8f1e-7d6c1c1a3e2b", "outcome": "sent"}, {"id": 1, "token": "6f1c1a3e-2b1a-4a55-8f1e-7d6c1c1a3e2", "outcome": "sent"}]')$$, '22023',
  'mailroom: results[1].token: must be a UUID string', 'a token one digit short');
-- A token is what the uuid type reads: other spellings of a UUID are taken
-- (no lease has these: nothing is applied), broken ones are refused.
SELECT is(mailroom.mark_outcomes('[{"id": 2, "token": "6f1c1a3e-2b1a-4a55-8f1e-7d6c1c1a3e2b", "outcome": "sent"}, {"id": 1, "token": "{6f1c1a3e-2b1a-4a55-8f1e-7d6c1c1a3e2b}", "outcome": "sent"}]'),
  0, 'a token in braces is a UUID');
SELECT is(mailroom.mark_outcomes('[{"id": 2, "token": "6f1c1a3e-2b1a-4a55-8f1e-7d6c1c1a3e2b", "outcome": "retry"}, {"id": 1, "token": "6f1c1a3e2b1a4a558f1e7d6c1c1a3e2b", "outcome": "sent"}]'),
  0, 'a token without hyphens is a UUID (beside a retry: the general pass reads it too)');
SELECT is(mailroom.mark_outcomes('[{"id": 2, "token": "6f1c1a3e-2b1a-4a55-8f1e-7d6c1c1a3e2b", "outcome": "sent"}, {"id": 1, "token": "6f1c-1a3e-2b1a-4a55-8f1e-7d6c-1c1a-3e2b", "outcome": "sent"}]'),
  0, 'a token with a hyphen after every four digits is a UUID');
SELECT throws_ok($$SELECT mailroom.mark_outcomes('[{"id": 2, "token": "6f1c1a3e-2b1a-4a55-8f1e-7d6c1c1a3e2b", "outcome": "sent"}, {"id": 1, "token": "{6f1c1a3e2b1a4a558f1e7d6c1c1a3e2b", "outcome": "sent"}]')$$, '22023',
  'mailroom: results[1].token: must be a UUID string', 'a token with an opening brace and no closing one');
SELECT throws_ok($$SELECT mailroom.mark_outcomes('[{"id": 2, "token": "6f1c1a3e-2b1a-4a55-8f1e-7d6c1c1a3e2b", "outcome": "retry"}, {"id": 1, "token": "6f1c1a3-e2b1a-4a55-8f1e-7d6c1c1a3e2b", "outcome": "sent"}]')$$, '22023',
  'mailroom: results[1].token: must be a UUID string', 'a token with a hyphen after seven digits');
SELECT throws_ok($$SELECT mailroom.mark_outcomes('[{"id": 2, "token": "6f1c1a3e-2b1a-4a55-8f1e-7d6c1c1a3e2b", "outcome": "sent"}, {"id": 9223372036854775808, "token": "6f1c1a3e-2b1a-4a55-8f1e-7d6c1c1a3e2b", "outcome": "sent"}]')$$, '22023',
  'mailroom: results[1].id: must be a positive integer', 'an id past the largest bigint');
SELECT throws_ok($$SELECT mailroom.mark_outcomes('[{"id": 2, "token": "6f1c1a3e-2b1a-4a55-8f1e-7d6c1c1a3e2b", "outcome": "sent"}, {"id": 1, "token": "6f1c1a3e-2b1a-4a55-8f1e-7d6c1c1a3e2b"}]')$$, '22023',
  'mailroom: results[1].outcome: missing', 'no outcome');
SELECT throws_ok($$SELECT mailroom.mark_outcomes('[{"id": 2, "token": "6f1c1a3e-2b1a-4a55-8f1e-7d6c1c1a3e2b", "outcome": "sent"}, {"id": 1, "token": "6f1c1a3e-2b1a-4a55-8f1e-7d6c1c1a3e2b", "outcome": null}]')$$, '22023',
  'mailroom: results[1].outcome: unknown outcome null (expected sent, retry, failed or ambiguous)', 'a null outcome');
SELECT throws_ok($$SELECT mailroom.mark_outcomes('[{"id": 2, "token": "6f1c1a3e-2b1a-4a55-8f1e-7d6c1c1a3e2b", "outcome": "sent"}, {"id": 1, "token": "6f1c1a3e-2b1a-4a55-8f1e-7d6c1c1a3e2b", "outcome": "SENT"}]')$$, '22023',
  'mailroom: results[1].outcome: unknown outcome "SENT" (expected sent, retry, failed or ambiguous)', 'an outcome in capitals');
SELECT throws_ok($$SELECT mailroom.mark_outcomes('[{"id": 2, "token": "6f1c1a3e-2b1a-4a55-8f1e-7d6c1c1a3e2b", "outcome": "sent"}, {"id": 1, "token": "6f1c1a3e-2b1a-4a55-8f1e-7d6c1c1a3e2b", "outcome": "failed", "smtp_code": 550.0}]')$$, '22023',
  'mailroom: results[1].smtp_code: must be a number from 200 to 599', 'an smtp_code written 550.0');
SELECT throws_ok($$SELECT mailroom.mark_outcomes('[{"id": 2, "token": "6f1c1a3e-2b1a-4a55-8f1e-7d6c1c1a3e2b", "outcome": "sent"}, {"id": 1, "token": "6f1c1a3e-2b1a-4a55-8f1e-7d6c1c1a3e2b", "outcome": "failed", "smtp_code": 199}]')$$, '22023',
  'mailroom: results[1].smtp_code: must be a number from 200 to 599', 'an smtp_code below 200');
SELECT throws_ok($$SELECT mailroom.mark_outcomes('[{"id": 2, "token": "6f1c1a3e-2b1a-4a55-8f1e-7d6c1c1a3e2b", "outcome": "sent"}, {"id": 1, "token": "6f1c1a3e-2b1a-4a55-8f1e-7d6c1c1a3e2b", "outcome": "failed", "smtp_code": 600}]')$$, '22023',
  'mailroom: results[1].smtp_code: must be a number from 200 to 599', 'an smtp_code above 599');
SELECT throws_ok($$SELECT mailroom.mark_outcomes('[{"id": 2, "token": "6f1c1a3e-2b1a-4a55-8f1e-7d6c1c1a3e2b", "outcome": "sent"}, {"id": 1, "token": "6f1c1a3e-2b1a-4a55-8f1e-7d6c1c1a3e2b", "outcome": "failed", "smtp_enhanced": "5.1"}]')$$, '22023',
  'mailroom: results[1].smtp_enhanced: must be an enhanced status code such as 5.1.1', 'an smtp_enhanced of two parts');
SELECT throws_ok($$SELECT mailroom.mark_outcomes('[{"id": 2, "token": "6f1c1a3e-2b1a-4a55-8f1e-7d6c1c1a3e2b", "outcome": "sent"}, {"id": 1, "token": "6f1c1a3e-2b1a-4a55-8f1e-7d6c1c1a3e2b", "outcome": "failed", "smtp_enhanced": 511}]')$$, '22023',
  'mailroom: results[1].smtp_enhanced: must be an enhanced status code such as 5.1.1', 'an smtp_enhanced that is a number');
SELECT throws_ok($$SELECT mailroom.mark_outcomes('[{"id": 2, "token": "6f1c1a3e-2b1a-4a55-8f1e-7d6c1c1a3e2b", "outcome": "sent"}, {"id": 1, "token": "6f1c1a3e-2b1a-4a55-8f1e-7d6c1c1a3e2b", "outcome": "failed", "detail": 5}]')$$, '22023',
  'mailroom: results[1].detail: must be a string', 'a detail that is a number');
SELECT throws_ok($$SELECT mailroom.mark_outcomes('[{"id": 2, "token": "6f1c1a3e-2b1a-4a55-8f1e-7d6c1c1a3e2b", "outcome": "sent"}, {"id": 1, "token": "6f1c1a3e-2b1a-4a55-8f1e-7d6c1c1a3e2b", "outcome": "sent", "provider_id": []}]')$$, '22023',
  'mailroom: results[1].provider_id: must be a string', 'a provider_id that is an array');
SELECT throws_ok($$SELECT mailroom.mark_outcomes('[{"id": 2, "token": "6f1c1a3e-2b1a-4a55-8f1e-7d6c1c1a3e2b", "outcome": "sent"}, [{"id": 1, "token": "6f1c1a3e-2b1a-4a55-8f1e-7d6c1c1a3e2b", "outcome": "sent"}]]')$$, '22023',
  'mailroom: results[1]: must be an object', 'an element that is an array of a valid outcome');
SELECT throws_ok($$SELECT mailroom.mark_outcomes('[{"id": 2, "token": "6f1c1a3e-2b1a-4a55-8f1e-7d6c1c1a3e2b", "outcome": "sent"}, null]')$$, '22023',
  'mailroom: results[1]: must be an object', 'a null element');
SELECT throws_ok($$SELECT mailroom.mark_outcomes('[{"id": 2, "token": "6f1c1a3e-2b1a-4a55-8f1e-7d6c1c1a3e2b", "outcome": "sent"}, "sent"]')$$, '22023',
  'mailroom: results[1]: must be an object', 'an element that is a string');
SELECT throws_ok($$SELECT mailroom.mark_outcome(1, gen_random_uuid(), 'bounced')$$, '22023',
  'mailroom: outcome: unknown outcome "bounced" (expected sent, retry, failed or ambiguous)', 'mark_outcome: unknown word');
SELECT throws_ok(format($$SELECT mailroom.mark_outcomes('[{"id": %s, "token": "%s", "outcome": "sent"}, {"id": 1, "token": "6f1c1a3e-2b1a-4a55-8f1e-7d6c1c1a3ezz", "outcome": "sent"}]')$$,
                        (SELECT id FROM undo WHERE delivery_key = 'lean-undo-1'), (SELECT lease_token FROM undo LIMIT 1)), '22023',
  'mailroom: results[1].token: must be a UUID string', 'a token that is no UUID, beside a report the lean statement could apply');
SELECT throws_ok(format($$SELECT mailroom.mark_outcomes('[{"id": %s, "token": "%s", "outcome": "sent"}, {"id": 1, "token": "6f1c1a3e-2b1a-4a55-8f1e-7d6c1c1a3e2b", "outcome": "delivered"}]')$$,
                        (SELECT id FROM undo WHERE delivery_key = 'lean-undo-1'), (SELECT lease_token FROM undo LIMIT 1)), '22023',
  'mailroom: results[1].outcome: unknown outcome "delivered" (expected sent, retry, failed or ambiguous)',
  'an unknown outcome after a report the lean statement applied');
SELECT throws_ok(format($$SELECT mailroom.mark_outcomes('[{"id": %1$s, "token": "%2$s", "outcome": "sent"}, {"id": %1$s, "token": "%2$s", "outcome": "sent"}]')$$,
                        (SELECT id FROM undo WHERE delivery_key = 'lean-undo-2'), (SELECT lease_token FROM undo LIMIT 1)), '22023',
  format('mailroom: results: id %s appears more than once', (SELECT id FROM undo WHERE delivery_key = 'lean-undo-2')),
  'one mail reported twice as sent (the lean statement applies it once)');
SELECT results_eq($$SELECT (SELECT count(*) FROM mailroom.attempts WHERE reported IS NOT NULL),
                           (SELECT string_agg(status, ',' ORDER BY id) FROM mailroom.messages)$$,
  $$SELECT reported, statuses FROM before_errors$$, 'refused calls changed no message and no ledger row');
-- Any spelling of the lease's UUID names it.
SELECT is(mailroom._mark_outcomes(jsonb_build_array(
            jsonb_build_object('id', id, 'token', '{' || upper(replace(lease_token::text, '-', '')) || '}', 'outcome', 'sent')),
            '2030-03-01 00:02Z'),
          1, 'a token in capitals and braces, without hyphens, is applied')
FROM undo WHERE delivery_key = 'lean-undo-1';

SELECT * FROM finish();
ROLLBACK;
