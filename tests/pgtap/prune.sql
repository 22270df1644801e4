-- Tests for mailroom:prune
BEGIN;
SELECT plan(28);
SET LOCAL client_min_messages = warning;
\ir include/core_state.psql

SELECT has_function('mailroom', 'prune', ARRAY['interval', 'integer'], 'prune exists');
SELECT hasnt_function('mailroom', 'prune', ARRAY['interval', 'timestamp with time zone'], 'and takes no clock parameter');
SELECT is_definer('mailroom', 'prune', ARRAY['interval', 'integer'], 'it is SECURITY DEFINER');
SELECT function_privs_are('mailroom', 'prune', ARRAY['interval', 'integer'],
  'mailroom_operator', ARRAY['EXECUTE'], 'operators may prune');
SELECT function_privs_are('mailroom', '_prune', ARRAY['interval', 'integer', 'timestamp with time zone'],
  'mailroom_operator', ARRAY[]::text[], 'the twin that pins the clock is the owner''s only');
SELECT has_index('mailroom', 'attempts', 'attempts_finished_at_idx', ARRAY['finished_at'],
  'finishing rows are indexed by finish time');

-- 7 old finished mails (sent, failed, cancelled after an expired attempt), a
-- review item and a queued mail just as old, and 1 recently sent mail.
UPDATE mailroom.settings SET value = '30 days' WHERE key = 'attempts_retention';
UPDATE mailroom.settings SET value = '3' WHERE key = 'prune_batch_size';
UPDATE mailroom.settings SET value = '2' WHERE key = 'prune_max_batches';
SELECT pg_temp.t_mail('old-' || g, p_to => 'u' || g || '@example.com', p_on_ambiguous => CASE WHEN g = 8 THEN 'review' ELSE 'retry' END,
                      p_at => '2030-01-01Z')
FROM generate_series(1, 9) g;
SELECT pg_temp.t_claim('old-' || g, 'w', '2030-01-01Z') FROM generate_series(1, 8) g;
SELECT pg_temp.t_end('old-' || g, CASE g WHEN 8 THEN 'ambiguous' WHEN 5 THEN 'failed' ELSE 'sent' END, '2030-01-01 00:00:01Z',
                     CASE g WHEN 8 THEN 'ambiguous' WHEN 5 THEN 'failed' ELSE 'sent' END)
FROM generate_series(1, 8) g WHERE g <> 6;
SELECT pg_temp.t_end('old-6', 'expired', '2030-01-01 00:02Z');
SELECT pg_temp.t_decide('old-6', 'cancelled', 'cancelled', 'test', '2030-01-01 00:03Z');
SELECT pg_temp.t_mail('new', p_at => '2030-02-15Z');
SELECT pg_temp.t_claim(k, 'w', '2030-02-15Z') FROM unnest(ARRAY['new', 'old-9']) k;
SELECT pg_temp.t_end('new', 'sent', '2030-02-15Z', 'sent');
SELECT pg_temp.t_end('old-9', 'retry', '2030-02-15Z', 'retry');
SELECT is((SELECT count(*)::int FROM mailroom.messages WHERE status IN ('sent', 'failed', 'cancelled')), 8, '8 finished mails');

CREATE TEMP TABLE snap AS SELECT id FROM mailroom.contents;
SELECT throws_ok($$SELECT * FROM mailroom._prune('23 hours', NULL, '2030-03-01Z')$$, '22023',
  'mailroom: older_than: must be at least 1 day, got 23:00:00', 'less than a day is refused');
SELECT throws_ok($$SELECT * FROM mailroom._prune(NULL, NULL, NULL)$$, '22023', 'mailroom: now: must not be NULL', 'NULL now');
SELECT throws_ok($$SELECT * FROM mailroom.prune('101 years')$$, '22023',
  'mailroom: older_than: must be at most 100 years, got 101 years', 'over 100 years is refused');
SELECT throws_ok($$SELECT * FROM mailroom.prune('1000000 years')$$, '22023',
  'mailroom: older_than: must be at most 100 years, got 1000000 years', 'past the timestamp range is refused, not 22008');
SELECT throws_ok($$SELECT * FROM mailroom.prune(NULL, 0)$$, '22023',
  'mailroom: batch: must be between 1 and 1000000, got 0', 'a batch of 0 is refused');
UPDATE mailroom.settings SET value = '0' WHERE key = 'prune_batch_size';
SELECT throws_ok($$SELECT * FROM mailroom._prune(NULL, NULL, '2030-03-01Z')$$, '22023',
  'mailroom: prune_batch_size: must be between 1 and 1000000, got 0', 'a broken batch setting is refused');
UPDATE mailroom.settings SET value = '3' WHERE key = 'prune_batch_size';
SELECT results_eq($$SELECT id FROM mailroom.contents ORDER BY id$$, $$SELECT id FROM snap ORDER BY id$$, 'bad input deleted nothing');

CREATE TEMP TABLE queue_before AS
SELECT seq_scan, idx_scan, n_tup_ins, n_tup_upd, n_tup_del FROM pg_stat_xact_all_tables WHERE relid = 'mailroom.queue'::regclass;
SELECT results_eq($$SELECT * FROM mailroom._prune(NULL, NULL, '2030-02-20Z')$$,
  $$VALUES (6::bigint, 6::bigint, 2, true)$$,
  'one call retires at most prune_max_batches x prune_batch_size mails with their ledger rows, and says there is more');
SELECT results_eq($$SELECT * FROM mailroom._prune(NULL, NULL, '2030-02-20Z')$$,
  $$VALUES (1::bigint, 2::bigint, 1, false)$$, 'the next call takes the rest (the cancelled mail: its expired attempt and its cancel)');
SELECT results_eq(
  $$SELECT seq_scan, idx_scan, n_tup_ins, n_tup_upd, n_tup_del FROM pg_stat_xact_all_tables WHERE relid = 'mailroom.queue'::regclass$$,
  $$SELECT * FROM queue_before$$, 'prune never read or wrote the hot queue');
SELECT results_eq($$SELECT delivery_key, status FROM mailroom.messages ORDER BY delivery_key$$,
  $$VALUES ('new'::text, 'sent'::text), ('old-8', 'review'), ('old-9', 'queued')$$,
  'recent finished mail, review items and queued mail are kept');
SELECT results_eq($$SELECT c.delivery_key, a.outcome FROM mailroom.attempts a JOIN mailroom.contents c ON c.id = a.message_id ORDER BY 1$$,
  $$VALUES ('new'::text, 'sent'::text), ('old-8', 'ambiguous'), ('old-9', 'retry')$$,
  'only their ledger rows remain (a live mail''s old attempts stay with it)');
SELECT is((SELECT count(*)::int FROM mailroom.integrity_problems()), 0, 'and nothing is left half-retired');

-- Delivery-key idempotency holds until prune removes the contents row.
SELECT is(mailroom.enqueue('new@example.com', 'Hi', 'B', p_delivery_key => 'new'), pg_temp.t_id('new'),
  'a kept key is still idempotent: the same id comes back');
SELECT ok(mailroom.enqueue('u1@example.com', 'Hi', 'B', p_delivery_key => 'old-1') NOT IN (SELECT id FROM snap),
  'a retired key is new again: enqueue makes a new mail');
DELETE FROM mailroom.queue WHERE id = pg_temp.t_id('old-1');
DELETE FROM mailroom.contents WHERE delivery_key = 'old-1';

SELECT is((SELECT messages FROM mailroom._prune('1 day', NULL, '2030-02-15 12:00Z')), 0::bigint, 'mail younger than the age given stays');
SELECT is((SELECT messages FROM mailroom._prune('1 day', 1, '2030-02-16 12:00Z')), 1::bigint, 'an explicit age overrides the setting');
SELECT results_eq($$SELECT * FROM mailroom.prune()$$, $$VALUES (0::bigint, 0::bigint, 1, false)$$,
  'the public function cuts at now() - attempts_retention');

SET LOCAL ROLE mailroom_operator;
SELECT lives_ok($$SELECT * FROM mailroom.prune()$$, 'operators prune');
RESET ROLE;
SET LOCAL ROLE mailroom_runner;
SELECT throws_ok($$SELECT * FROM mailroom.prune()$$, '42501', 'permission denied for function prune', 'runners get 42501');
RESET ROLE;
SET LOCAL ROLE mailroom_app;
SELECT throws_ok($$SELECT * FROM mailroom.prune()$$, '42501', 'permission denied for function prune', 'apps get 42501');
RESET ROLE;

SELECT * FROM finish();
ROLLBACK;
