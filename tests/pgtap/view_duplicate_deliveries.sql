-- Tests for mailroom:view_duplicate_deliveries
BEGIN;
SELECT plan(11);
SET LOCAL client_min_messages = warning;
\ir include/core_state.psql

SELECT has_view('mailroom', 'duplicate_deliveries', 'duplicate_deliveries exists');
SELECT view_owner_is('mailroom', 'duplicate_deliveries', 'mailroom_owner', 'owned by mailroom_owner');
SELECT ok((SELECT 'security_barrier=true' = ANY (reloptions) FROM pg_class WHERE oid = 'mailroom.duplicate_deliveries'::regclass),
  'a security barrier view');
SELECT table_privs_are('mailroom', 'duplicate_deliveries', 'mailroom_operator', ARRAY['SELECT'], 'operators may read it');
SELECT has_index('mailroom', 'attempts', 'attempts_doubtful_idx', ARRAY['message_id'], 'doubtful attempts are indexed');

-- twice:    runner 1 hangs past its lease, runner 2 sends, then runner 1 reports sent too.
-- maybe:    runner 1 dies (no report), runner 2 sends: the first attempt's fate is unknown.
-- timeout:  runner 1 reports a timeout after DATA (retry policy), runner 2 sends.
-- once:     runner 1 fails with 451, runner 2 sends: proven single delivery.
-- live:     like maybe, but runner 2 still sends: nothing to say yet.
SELECT pg_temp.t_mail(k, p_at => '2030-01-01Z') FROM unnest(ARRAY['twice', 'maybe', 'timeout', 'once', 'live']) AS k;
SELECT pg_temp.t_claim(k, 'w1', '2030-01-01 00:00:01Z') FROM unnest(ARRAY['twice', 'maybe', 'timeout', 'once', 'live']) k;
SELECT pg_temp.t_end('timeout', 'ambiguous', '2030-01-01 00:00:30Z', 'ambiguous', p_smtp_text => 'x');
SELECT pg_temp.t_end('once', 'retry', '2030-01-01 00:00:30Z', 'retry', p_smtp_code => 451, p_smtp_text => 'x');
SELECT pg_temp.t_end(k, 'expired', '2030-01-01 00:02Z') FROM unnest(ARRAY['twice', 'maybe', 'live']) k;
SELECT pg_temp.t_claim(k, 'w2', '2030-01-01 00:02:01Z') FROM unnest(ARRAY['twice', 'maybe', 'timeout', 'once', 'live']) k;
SELECT pg_temp.t_end(k, 'sent', '2030-01-01 00:02:02Z', 'sent', p_smtp_code => 250) FROM unnest(ARRAY['twice', 'maybe', 'timeout', 'once']) k;
SELECT pg_temp.t_late('twice', 'w1', '2030-01-01 00:02:03Z', p_duplicate => true, p_smtp_code => 250);

SELECT results_eq(
  $$SELECT delivery_key, status, certainty, successful_attempts, unproven_attempts, workers, reports, last_sent_at
    FROM mailroom.duplicate_deliveries ORDER BY delivery_key$$,
  $$VALUES ('maybe'::text, 'sent'::text, 'possible'::text, 1::bigint, 1::bigint, ARRAY['w1', 'w2'], ARRAY['-/expired', 'sent/sent'],
            '2030-01-01 00:02:02Z'::timestamptz),
           ('timeout', 'sent', 'possible', 1, 1, ARRAY['w1', 'w2'], ARRAY['ambiguous/ambiguous', 'sent/sent'], '2030-01-01 00:02:02Z'),
           ('twice', 'sent', 'confirmed', 2, 0, ARRAY['w1', 'w2'], ARRAY['sent/stale', 'sent/sent'], '2030-01-01 00:02:03Z')$$,
  'confirmed duplicates (two successful sends) and possible ones (a send after an unproven attempt), with the mail''s state from its finishing row; a proven retry and an unproven attempt followed by none are not listed');
SELECT results_eq($$SELECT delivery_key, to_address, sender FROM mailroom.duplicate_deliveries WHERE delivery_key = 'twice'$$,
  $$VALUES ('twice'::text, 'twice@example.com'::text, 'default'::text)$$, 'key, address and sender from contents');

SET LOCAL ROLE mailroom_operator;
SELECT is((SELECT count(*)::int FROM mailroom.duplicate_deliveries), 3, 'an operator reads it');
RESET ROLE;
SET LOCAL ROLE mailroom_app;
SELECT throws_ok($$SELECT * FROM mailroom.duplicate_deliveries$$, '42501', 'permission denied for view duplicate_deliveries', 'apps get 42501');
RESET ROLE;
SET LOCAL ROLE mailroom_runner;
SELECT throws_ok($$SELECT * FROM mailroom.duplicate_deliveries$$, '42501', 'permission denied for view duplicate_deliveries', 'runners get 42501');
RESET ROLE;
SELECT alike(pg_temp.t_plan('SELECT * FROM mailroom.duplicate_deliveries'), '%attempts_doubtful_idx%',
  'candidates come from attempts_doubtful_idx, not from the whole ledger');

SELECT * FROM finish();
ROLLBACK;
