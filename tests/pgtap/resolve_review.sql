-- Tests for mailroom:resolve_review
BEGIN;
SELECT plan(18);
SET LOCAL client_min_messages = warning;
TRUNCATE mailroom.queue, mailroom.contents, mailroom.attempts CASCADE;
TRUNCATE mailroom.suppressions;

SELECT has_function('mailroom', 'resolve_review', ARRAY['bigint', 'text'], 'resolve_review exists');
SELECT is_definer('mailroom', 'resolve_review', ARRAY['bigint', 'text'], 'it is SECURITY DEFINER');
SELECT function_privs_are('mailroom', 'resolve_review', ARRAY['bigint', 'text'],
  'mailroom_operator', ARRAY['EXECUTE'], 'operators may resolve reviews');

SELECT mailroom.enqueue(k || '@example.com', 'Hi', 'B', p_delivery_key => k, p_on_ambiguous => 'review', p_send_at => '2030-01-01Z')
FROM unnest(ARRAY['r-sent', 'r-retry', 'r-cancel', 'r-suppressed', 'done']) AS k;
CREATE TEMP TABLE c AS SELECT * FROM mailroom._claim_batch('w', 5, '1 minute', NULL, '2030-01-01 00:01Z');
SELECT mailroom._mark_outcome(id, lease_token, 'sent', NULL, NULL, NULL, NULL, '2030-01-01 00:01:30Z') FROM c WHERE delivery_key = 'done';
SELECT mailroom._reclaim(p_now => '2030-01-01 00:05Z');
INSERT INTO mailroom.suppressions (address_key, address, reason) VALUES ('r-suppressed@example.com', 'r-suppressed@example.com', 'unsubscribed');
CREATE TEMP TABLE ids AS SELECT delivery_key AS k, id FROM mailroom.contents;
SELECT is((SELECT count(*)::int FROM mailroom.queue WHERE status = 'review'), 4, 'four mails wait for review (queue rows in review)');

SELECT is(mailroom.resolve_review((SELECT id FROM ids WHERE k = 'r-sent'), 'sent'), 'sent', 'sent: returns the new status');
SELECT is(mailroom.resolve_review((SELECT id FROM ids WHERE k = 'r-retry'), 'retry'), 'queued', 'retry: queued');
SELECT is(mailroom.resolve_review((SELECT id FROM ids WHERE k = 'r-cancel'), 'cancel'), 'cancelled', 'cancel: cancelled');
SELECT results_eq(
  $$SELECT k, status, status_reason, sent_at = now(), attempts, run_at = now() FROM mailroom.messages JOIN ids USING (id)
    WHERE k LIKE 'r-%' AND k <> 'r-suppressed' ORDER BY k$$,
  $$VALUES ('r-cancel'::text, 'cancelled'::text, 'review resolved: cancel'::text, NULL::boolean, 1, NULL::boolean),
           ('r-retry', 'queued', 'review resolved: retry', NULL, 0, true),
           ('r-sent', 'sent', 'review resolved: sent', true, 1, NULL)$$,
  'each decision leaves the message in the right state (retry: due now, attempts reset)');
SELECT results_eq($$SELECT i.k, a.outcome, a.finished_as, a.attempt FROM mailroom.attempts a JOIN ids i ON i.id = a.message_id
                    WHERE i.k IN ('r-sent', 'r-cancel') AND a.finished_as IS NOT NULL ORDER BY i.k$$,
  $$VALUES ('r-cancel'::text, 'resolved'::text, 'cancelled'::text, 1), ('r-sent', 'resolved', 'sent', 1)$$,
  'sent and cancel finish the mail with one resolved ledger row (and it leaves the queue)');

CREATE TEMP TABLE snap AS SELECT id, status, status_reason, attempts FROM mailroom.messages;
SELECT throws_ok($$SELECT mailroom.resolve_review(NULL, 'sent')$$, '22023', 'mailroom: id: a message id is required', 'NULL id');
SELECT throws_ok(format('SELECT mailroom.resolve_review(%s, %L)', (SELECT id FROM ids WHERE k = 'r-suppressed'), 'resend'), '22023',
  'mailroom: decision: must be sent, retry or cancel, got resend', 'an unknown decision');
SELECT throws_ok($$SELECT mailroom.resolve_review(999999, 'sent')$$, 'P0002', 'mailroom: id: no message with id 999999', 'an unknown id');
SELECT throws_ok(format('SELECT mailroom.resolve_review(%s, %L)', (SELECT id FROM ids WHERE k = 'done'), 'retry'), '55000',
  format('mailroom: id: message %s is sent, not in review', (SELECT id FROM ids WHERE k = 'done')), 'a message not in review');
SELECT throws_ok(format('SELECT mailroom.resolve_review(%s, %L)', (SELECT id FROM ids WHERE k = 'r-suppressed'), 'retry'), '55000',
  format('mailroom: decision: message %s goes to a suppressed address and cannot be retried', (SELECT id FROM ids WHERE k = 'r-suppressed')),
  'retrying mail to a suppressed address');
SELECT results_eq($$SELECT id, status, status_reason, attempts FROM mailroom.messages ORDER BY id$$,
  $$SELECT * FROM snap ORDER BY id$$, 'bad input changed nothing');

SELECT id AS suppressed_id FROM ids WHERE k = 'r-suppressed' \gset
SET LOCAL ROLE mailroom_operator;
SELECT is(mailroom.resolve_review(:suppressed_id, 'cancel'), 'cancelled', 'an operator resolves one');
RESET ROLE;
SET LOCAL ROLE mailroom_runner;
SELECT throws_ok($$SELECT mailroom.resolve_review(1, 'sent')$$, '42501', 'permission denied for function resolve_review', 'runners get 42501');
RESET ROLE;
SET LOCAL ROLE mailroom_app;
SELECT throws_ok($$SELECT mailroom.resolve_review(1, 'sent')$$, '42501', 'permission denied for function resolve_review', 'apps get 42501');
RESET ROLE;

SELECT * FROM finish();
ROLLBACK;
