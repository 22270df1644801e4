-- Tests for mailroom:prune
BEGIN;
SELECT plan(19);
SET LOCAL client_min_messages = warning;
TRUNCATE mailroom.messages CASCADE;
TRUNCATE mailroom.suppressions;

SELECT has_function('mailroom', 'prune', ARRAY['interval', 'timestamp with time zone'], 'prune exists');
SELECT is_definer('mailroom', 'prune', ARRAY['interval', 'timestamp with time zone'], 'it is SECURITY DEFINER');
SELECT function_privs_are('mailroom', 'prune', ARRAY['interval', 'timestamp with time zone'],
  'mailroom_operator', ARRAY['EXECUTE'], 'operators may prune');
SELECT has_index('mailroom', 'messages', 'messages_finished_idx', ARRAY['updated_at'], 'finished mail is indexed by age');

-- 7 old finished mails (sent, failed, cancelled), a review item and a queued
-- mail just as old, and 1 recently sent mail.
UPDATE mailroom.settings SET value = '30 days' WHERE key = 'attempts_retention';
UPDATE mailroom.settings SET value = '3' WHERE key = 'prune_batch_size';
UPDATE mailroom.settings SET value = '2' WHERE key = 'prune_max_batches';
SELECT mailroom.enqueue('u' || g || '@example.com', 'Hi', 'B', p_delivery_key => 'old-' || g,
                        p_on_ambiguous => CASE WHEN g = 8 THEN 'review' ELSE 'retry' END, p_now => '2030-01-01Z')
FROM generate_series(1, 9) g;
CREATE TEMP TABLE c AS SELECT * FROM mailroom.claim_batch('w', 8, '1 minute', NULL, '2030-01-01Z');
SELECT mailroom.mark_outcomes(jsonb_agg(jsonb_build_object('id', id, 'token', lease_token, 'outcome',
         CASE delivery_key WHEN 'old-8' THEN 'ambiguous' WHEN 'old-5' THEN 'failed' ELSE 'sent' END)), '2030-01-01 00:00:01Z')
FROM c WHERE delivery_key <> 'old-6';
SELECT mailroom.reclaim('2030-01-01 00:02Z');
SELECT * FROM mailroom.cancel(ARRAY[(SELECT id FROM mailroom.messages WHERE delivery_key = 'old-6')], 'test', '2030-01-01 00:03Z');
SELECT mailroom.enqueue('new@example.com', 'Hi', 'B', p_delivery_key => 'new', p_now => '2030-02-15Z');
CREATE TEMP TABLE c2 AS SELECT * FROM mailroom.claim_batch('w', 2, '1 minute', NULL, '2030-02-15Z');
SELECT mailroom.mark_outcome(id, lease_token, CASE delivery_key WHEN 'new' THEN 'sent' ELSE 'retry' END,
                             NULL, NULL, NULL, NULL, '2030-02-15Z') FROM c2;
SELECT is((SELECT count(*)::int FROM mailroom.messages WHERE status IN ('sent', 'failed', 'cancelled')), 8, '8 finished mails');

CREATE TEMP TABLE snap AS SELECT id FROM mailroom.messages;
SELECT throws_ok($$SELECT * FROM mailroom.prune('23 hours', '2030-03-01Z')$$, '22023',
  'mailroom: older_than: must be at least 1 day, got 23:00:00', 'less than a day is refused');
SELECT throws_ok($$SELECT * FROM mailroom.prune(NULL, NULL)$$, '22023', 'mailroom: now: must not be NULL', 'NULL now');
SELECT throws_ok($$SELECT * FROM mailroom.prune('101 years', '2030-03-01Z')$$, '22023',
  'mailroom: older_than: must be at most 100 years, got 101 years', 'over 100 years is refused');
SELECT throws_ok($$SELECT * FROM mailroom.prune('1000000 years', '2030-03-01Z')$$, '22023',
  'mailroom: older_than: must be at most 100 years, got 1000000 years', 'past the timestamp range is refused, not 22008');
UPDATE mailroom.settings SET value = '0' WHERE key = 'prune_batch_size';
SELECT throws_ok($$SELECT * FROM mailroom.prune(NULL, '2030-03-01Z')$$, '22023',
  'mailroom: prune_batch_size: must be between 1 and 1000000, got 0', 'a broken batch setting is refused');
UPDATE mailroom.settings SET value = '3' WHERE key = 'prune_batch_size';
SELECT results_eq($$SELECT id FROM mailroom.messages ORDER BY id$$, $$SELECT id FROM snap ORDER BY id$$, 'bad input deleted nothing');

SELECT results_eq($$SELECT * FROM mailroom.prune(NULL, '2030-02-20Z')$$,
  $$VALUES (6::bigint, 6::bigint, 2, true)$$,
  'one call deletes at most prune_max_batches x prune_batch_size messages with their ledger rows, and says there is more');
SELECT results_eq($$SELECT * FROM mailroom.prune(NULL, '2030-02-20Z')$$,
  $$VALUES (1::bigint, 1::bigint, 1, false)$$, 'the next call takes the rest');
SELECT results_eq($$SELECT delivery_key, status FROM mailroom.messages ORDER BY delivery_key$$,
  $$VALUES ('new'::text, 'sent'::text), ('old-8', 'review'), ('old-9', 'queued')$$,
  'recent finished mail, review items and queued mail are kept');
SELECT is((SELECT count(*)::int FROM mailroom.attempts), 3, 'only their ledger rows remain');
SELECT is((SELECT messages FROM mailroom.prune('1 day', '2030-02-15 12:00Z')), 0::bigint, 'mail younger than the age given stays');
SELECT is((SELECT messages FROM mailroom.prune('1 day', '2030-02-16 12:00Z')), 1::bigint, 'an explicit age overrides the setting');

SET LOCAL ROLE mailroom_runner;
SELECT throws_ok($$SELECT * FROM mailroom.prune()$$, '42501', 'permission denied for function prune', 'runners get 42501');
RESET ROLE;
SET LOCAL ROLE mailroom_app;
SELECT throws_ok($$SELECT * FROM mailroom.prune()$$, '42501', 'permission denied for function prune', 'apps get 42501');
RESET ROLE;

SELECT * FROM finish();
ROLLBACK;
