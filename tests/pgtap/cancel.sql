-- Tests for mailroom:cancel
BEGIN;
SELECT plan(15);
SET LOCAL client_min_messages = warning;
TRUNCATE mailroom.queue, mailroom.contents, mailroom.attempts CASCADE;
TRUNCATE mailroom.suppressions;

SELECT has_function('mailroom', 'cancel', ARRAY['bigint[]', 'text'], 'cancel exists');
SELECT is_definer('mailroom', 'cancel', ARRAY['bigint[]', 'text'], 'cancel is SECURITY DEFINER');
SELECT function_privs_are('mailroom', 'cancel', ARRAY['bigint[]', 'text'],
  'mailroom_operator', ARRAY['EXECUTE'], 'operators may cancel');

SELECT mailroom.enqueue(k || '@example.com', 'Hi', 'B', p_delivery_key => k, p_on_ambiguous => 'review', p_send_at => '2030-01-01Z')
FROM unnest(ARRAY['fail', 'rev', 'done', 'busy', 'wait', 'held']) AS k;
CREATE TEMP TABLE c AS SELECT * FROM mailroom._claim_batch('w', 4, '1 minute', NULL, '2030-01-01 00:01Z');
SELECT mailroom._mark_outcomes(jsonb_agg(jsonb_build_object('id', id, 'token', lease_token, 'outcome',
         CASE delivery_key WHEN 'fail' THEN 'failed' WHEN 'rev' THEN 'ambiguous' ELSE 'sent' END)), '2030-01-01 00:02Z')
FROM c WHERE delivery_key <> 'busy';
UPDATE mailroom.queue SET status = 'paused' WHERE id = (SELECT id FROM mailroom.contents WHERE delivery_key = 'held');
CREATE TEMP TABLE ids AS SELECT delivery_key AS k, id FROM mailroom.contents;

SELECT results_eq(
  $$SELECT i.k, r.previous_status, r.status FROM mailroom.cancel(ARRAY(SELECT id FROM ids), 'customer asked') r
    JOIN ids i USING (id) ORDER BY i.k$$,
  $$VALUES ('busy'::text, 'sending'::text, 'sending'::text), ('done', 'sent', 'sent'), ('fail', 'failed', 'cancelled'),
           ('held', 'paused', 'cancelled'), ('rev', 'review', 'cancelled'), ('wait', 'queued', 'cancelled')$$,
  'queued, paused, review and failed mail is cancelled; mail being sent or already sent is not');
SELECT is((SELECT count(*)::int FROM mailroom.messages WHERE status_reason = 'customer asked' AND finished_at = now()), 4,
  'the reason is recorded');
SELECT results_eq($$SELECT i.k, a.outcome, a.finished_as FROM mailroom.attempts a JOIN ids i ON i.id = a.message_id
                    WHERE i.k IN ('fail', 'wait') ORDER BY i.k, a.id$$,
  $$VALUES ('fail'::text, 'failed'::text, NULL::text), ('fail', 'cancelled', 'cancelled'), ('wait', 'cancelled', 'cancelled')$$,
  'cancelling finishes with one cancelled ledger row; a failed mail keeps its failed attempt as a plain row');
SELECT is((SELECT count(*)::int FROM mailroom.queue WHERE id IN (SELECT id FROM ids WHERE k IN ('wait', 'held', 'rev'))), 0,
  'cancelled mail has left the queue');
SELECT results_eq($$SELECT previous_status, status FROM mailroom.cancel(ARRAY[999999])$$, $$VALUES (NULL::text, NULL::text)$$,
  'an unknown id is reported as NULL');
SELECT is((SELECT count(*)::int FROM mailroom._claim_batch('w2', 10, '1 minute', NULL, '2030-01-02Z')), 0, 'cancelled mail is never claimed');

CREATE TEMP TABLE snap AS SELECT id, status, status_reason FROM mailroom.messages;
SELECT throws_ok($$SELECT * FROM mailroom.cancel(NULL)$$, '22023', 'mailroom: ids: at least one message id is required', 'NULL ids');
SELECT throws_ok($$SELECT * FROM mailroom.cancel(ARRAY[(SELECT id FROM ids WHERE k = 'busy')], '')$$, '22023',
  'mailroom: reason: must be 1 to 200 characters', 'an empty reason');
SELECT throws_ok($$SELECT * FROM mailroom.cancel(ARRAY[1], repeat('x', 201))$$, '22023',
  'mailroom: reason: must be 1 to 200 characters', 'a long reason');
SELECT results_eq($$SELECT id, status, status_reason FROM mailroom.messages ORDER BY id$$,
  $$SELECT * FROM snap ORDER BY id$$, 'bad input changed nothing');

SET LOCAL ROLE mailroom_app;
SELECT throws_ok($$SELECT * FROM mailroom.cancel(ARRAY[1])$$, '42501', 'permission denied for function cancel', 'apps get 42501');
RESET ROLE;
SET LOCAL ROLE mailroom_runner;
SELECT throws_ok($$SELECT * FROM mailroom.cancel(ARRAY[1])$$, '42501', 'permission denied for function cancel', 'runners get 42501');
RESET ROLE;

SELECT * FROM finish();
ROLLBACK;
