-- pgTAP: bounces and complaints recorded by record_feedback count against
-- the circuit breaker once per event; other kinds do not count.
BEGIN;
SELECT plan(7);

SELECT has_trigger('mailroom', 'feedback_events', 'feedback_events_breaker', 'the breaker trigger exists');
SELECT is_definer('mailroom', '_breaker_feedback_event', ARRAY[]::text[], 'its function is SECURITY DEFINER');

SELECT mailroom.set_breaker_thresholds('sender', p_window_size => 100, p_min_sample => 10);
CREATE TEMP TABLE m AS
SELECT mailroom.enqueue('r' || g || '@example.org', 'Hi', 'text', p_sender => 'shop') AS id FROM generate_series(1, 10) g;
CREATE TEMP TABLE b AS SELECT * FROM mailroom.claim_batch('w', 10);
SELECT mailroom.mark_outcomes((SELECT jsonb_agg(jsonb_build_object('id', id, 'token', lease_token, 'outcome', 'sent')) FROM b));
SELECT results_eq($$SELECT delivered, bounced FROM mailroom.breaker_status WHERE scope = 'sender' AND key = 'shop'$$,
  $$VALUES (10.00, 0.00)$$, 'ten delivered');

SELECT mailroom.record_feedback('delayed', (SELECT min(id) FROM m), NULL, '4.2.2', 'mailbox full', 'ses', 'e:1');
SELECT mailroom.record_feedback('delivered', (SELECT min(id) FROM m), NULL, NULL, NULL, 'ses', 'e:2');
SELECT results_eq($$SELECT delivered, bounced, complained FROM mailroom.breaker_status WHERE key = 'shop'$$,
  $$VALUES (10.00, 0.00, 0.00)$$, 'delayed and delivered events do not count');

SELECT mailroom.record_feedback('bounce', (SELECT max(id) FROM m), NULL, '5.1.1', 'no such user', 'ses', 'e:3');
SELECT mailroom.record_feedback('bounce', (SELECT max(id) FROM m), NULL, '5.1.1', 'no such user', 'ses', 'e:3');
SELECT results_eq($$SELECT delivered, bounced, state FROM mailroom.breaker_status WHERE key = 'shop'$$,
  $$VALUES (10.00, 1.00, 'paused')$$, 'a bounce counts once, replayed or not, and 1 in 10 pauses the sender');
SELECT is((SELECT count(*)::int FROM mailroom.sender_pauses WHERE sender = 'shop'), 1, 'the sender is paused');
SELECT is((SELECT count(*)::int FROM mailroom.breaker_trips WHERE key = 'shop'), 1, 'one trip recorded');

SELECT * FROM finish();
ROLLBACK;
