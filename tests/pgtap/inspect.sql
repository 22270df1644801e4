-- Tests for mailroom:inspect
BEGIN;
SELECT plan(11);
SET LOCAL client_min_messages = warning;
TRUNCATE mailroom.messages CASCADE;
TRUNCATE mailroom.suppressions;

SELECT has_function('mailroom', 'inspect', ARRAY['text'], 'inspect exists');
SELECT is_definer('mailroom', 'inspect', ARRAY['text'], 'it is SECURITY DEFINER');
SELECT function_privs_are('mailroom', 'inspect', ARRAY['text'], 'mailroom_operator', ARRAY['EXECUTE'], 'operators may inspect');

SELECT mailroom.enqueue('ann@example.com', 'Hi', 'Body text', p_delivery_key => 'order-42', p_now => '2030-01-01Z');
SELECT mailroom.enqueue('bob@example.com', 'Hi', 'B', p_delivery_key => (SELECT id::text FROM mailroom.messages), p_now => '2030-01-01Z');
CREATE TEMP TABLE c AS SELECT * FROM mailroom.claim_batch('w1', 1, '1 minute', NULL, '2030-01-01 00:01Z');
SELECT mailroom.reclaim('2030-01-01 00:03Z');
CREATE TEMP TABLE c2 AS SELECT * FROM mailroom.claim_batch('w2', 2, '1 minute', NULL, '2030-01-01 00:04Z');
SELECT mailroom.mark_outcome(id, lease_token, 'sent', '2.0.0 ok', 250, '2.0.0', 'P1', '2030-01-01 00:04:01Z') FROM c2
WHERE delivery_key = 'order-42';

SELECT is(mailroom.inspect('order-42') ->> 'status', 'sent', 'by delivery key');
SELECT is(mailroom.inspect('order-42') ->> 'body_text_bytes', '9', 'bodies are replaced by their sizes');
SELECT ok(NOT mailroom.inspect('order-42') ? 'body_text', 'the body itself is left out');
SELECT results_eq(
  $$SELECT e ->> 'worker', e ->> 'outcome', e ->> 'provider_id' FROM jsonb_array_elements(mailroom.inspect('order-42') -> 'ledger') e$$,
  $$VALUES ('w1'::text, 'expired'::text, NULL::text), ('w2', 'sent', 'P1')$$,
  'its ledger in order');
SELECT is(mailroom.inspect((SELECT id::text FROM mailroom.messages WHERE delivery_key = 'order-42')) ->> 'to_address', 'bob@example.com',
  'a delivery key that looks like an id wins over the id');
SELECT is(mailroom.inspect('no-such-key'), NULL, 'unknown: NULL');

SELECT throws_ok($$SELECT mailroom.inspect('')$$, '22023', 'mailroom: ref: a message id or delivery key is required', 'an empty ref');
SET LOCAL ROLE mailroom_app;
SELECT throws_ok($$SELECT mailroom.inspect('order-42')$$, '42501', 'permission denied for function inspect', 'apps get 42501');
RESET ROLE;

SELECT * FROM finish();
ROLLBACK;
