-- Tests for mailroom:inspect
BEGIN;
SELECT plan(15);
SET LOCAL client_min_messages = warning;
\ir include/core_state.psql

SELECT has_function('mailroom', 'inspect', ARRAY['text'], 'inspect exists');
SELECT is_definer('mailroom', 'inspect', ARRAY['text'], 'it is SECURITY DEFINER');
SELECT function_privs_are('mailroom', 'inspect', ARRAY['text'], 'mailroom_operator', ARRAY['EXECUTE'], 'operators may inspect');

SELECT pg_temp.t_mail('order-42', p_to => 'ann@example.com', p_body => 'Body text', p_at => '2030-01-01Z');
SELECT pg_temp.t_mail(pg_temp.t_id('order-42')::text, p_to => 'bob@example.com', p_at => '2030-01-01Z');
SELECT pg_temp.t_claim('order-42', 'w1', '2030-01-01 00:01Z');
SELECT pg_temp.t_end('order-42', 'expired', '2030-01-01 00:03Z');  -- reclaim
SELECT pg_temp.t_claim('order-42', 'w2', '2030-01-01 00:04Z');
SELECT pg_temp.t_end('order-42', 'sent', '2030-01-01 00:04:01Z', 'sent', p_smtp_code => 250, p_smtp_enhanced => '2.0.0',
                     p_smtp_text => '2.0.0 ok', p_provider => 'P1');

SELECT is(mailroom.inspect('order-42') ->> 'status', 'sent', 'by delivery key');
SELECT is(mailroom.inspect('order-42') ->> 'body_text_bytes', '9', 'bodies are replaced by their sizes');
SELECT ok(NOT mailroom.inspect('order-42') ? 'body_text', 'the body itself is left out');
SELECT results_eq(
  $$SELECT e ->> 'worker', e ->> 'outcome', e ->> 'provider_id', e ->> 'finished_as' FROM jsonb_array_elements(mailroom.inspect('order-42') -> 'ledger') e$$,
  $$VALUES ('w1'::text, 'expired'::text, NULL::text, NULL::text), ('w2', 'sent', 'P1', 'sent')$$,
  'its ledger in order');
SELECT results_eq(
  $$SELECT m ->> 'finished_at', m -> 'finished' ->> 'worker', m -> 'finished' ->> 'finished_as', m ->> 'sent_at', m ->> 'successful_sends'
    FROM mailroom.inspect('order-42') m$$,
  $$VALUES (to_jsonb('2030-01-01 00:04:01Z'::timestamptz) #>> '{}', 'w2'::text, 'sent'::text,
            to_jsonb('2030-01-01 00:04:01Z'::timestamptz) #>> '{}', '1'::text)$$,
  'how it finished: finished_at, sent_at and the finishing row itself');
SELECT is(mailroom.inspect((SELECT id::text FROM mailroom.contents WHERE delivery_key = 'order-42')) ->> 'to_address', 'bob@example.com',
  'a delivery key that looks like an id wins over the id');
SELECT is(mailroom.inspect(pg_temp.t_id(pg_temp.t_id('order-42')::text)::text) ->> 'delivery_key',
  (SELECT id::text FROM mailroom.contents WHERE delivery_key = 'order-42'), 'and an id finds its mail');

-- A live mail in flight: no finishing row, the attempt in flight ends the ledger.
SELECT pg_temp.t_claim(pg_temp.t_id('order-42')::text, 'w3', '2030-01-01 00:05Z');
SELECT results_eq(
  $$SELECT m ->> 'status', m -> 'finished', jsonb_array_length(m -> 'ledger'), m -> 'ledger' -> -1 ->> 'worker',
           m -> 'ledger' -> -1 ->> 'id', m -> 'ledger' -> -1 ->> 'outcome'
    FROM mailroom.inspect(pg_temp.t_id('order-42')::text) m$$,
  $$VALUES ('sending'::text, 'null'::jsonb, 1, 'w3'::text, NULL::text, NULL::text)$$,
  'a leased mail: no finishing row, and the attempt in flight from the queue row (id and outcome NULL)');
SELECT is((SELECT array_agg(k ORDER BY k COLLATE "C") FROM jsonb_object_keys(mailroom.inspect('order-42')) k),
  ARRAY['attempts', 'body_html_bytes', 'body_text_bytes', 'campaign_id', 'claimed_at', 'created_at', 'delivery_key',
        'finished', 'finished_at', 'headers', 'id', 'last_error', 'lease_token', 'leased_until', 'ledger',
        'max_attempts', 'on_ambiguous', 'priority', 'recipient_id', 'recipient_zone', 'run_at', 'schedule_id',
        'sender', 'sent_at', 'status', 'status_reason', 'stream', 'subject', 'successful_sends', 'suppressions',
        'template_key', 'template_vars', 'to_address', 'to_domain', 'updated_at', 'worker'],
  'the keys of v0.3, plus finished and finished_at, and stream and suppressions (issue 15)');
SELECT is(mailroom.inspect('no-such-key'), NULL, 'unknown: NULL');

SELECT throws_ok($$SELECT mailroom.inspect('')$$, '22023', 'mailroom: ref: a message id or delivery key is required', 'an empty ref');
SET LOCAL ROLE mailroom_app;
SELECT throws_ok($$SELECT mailroom.inspect('order-42')$$, '42501', 'permission denied for function inspect', 'apps get 42501');
RESET ROLE;

SELECT * FROM finish();
ROLLBACK;
