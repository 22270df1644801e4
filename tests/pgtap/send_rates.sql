-- pgTAP: the send-rate helpers claim_batch uses
BEGIN;
SELECT plan(21);

SELECT function_privs_are('mailroom', '_send_rate_available', ARRAY['text', 'integer', 'integer', 'timestamp with time zone'], 'mailroom_runner', ARRAY[]::text[], '_send_rate_available is internal');
SELECT function_privs_are('mailroom', '_send_rate_record', ARRAY['text[]', 'integer[]', 'interval[]', 'timestamp with time zone'], 'mailroom_runner', ARRAY[]::text[], '_send_rate_record is internal');
SELECT is_definer('mailroom', '_send_rate_record', ARRAY['text[]', 'integer[]', 'interval[]', 'timestamp with time zone'], '_send_rate_record is SECURITY DEFINER');

DELETE FROM mailroom.rate_limits;
SELECT is(mailroom._send_rate_available('mailroom/sender/t', 5, 12, '2030-01-01 00:00:00Z'), 5, 'a fresh sender has its per-second budget');
SELECT mailroom._send_rate_record('{mailroom/sender/t/s, mailroom/sender/t/m}', '{5, 5}', '{1 second, 1 minute}', '2030-01-01 00:00:00Z');
SELECT is(mailroom._send_rate_available('mailroom/sender/t', 5, 12, '2030-01-01 00:00:00.5Z'), 0, 'spent within the second');
SELECT is(mailroom._send_rate_available('mailroom/sender/t', 5, 12, '2030-01-01 00:00:01.1Z'), 5, 'free again a window later');
SELECT mailroom._send_rate_record('{mailroom/sender/t/s, mailroom/sender/t/m}', '{5, 5}', '{1 second, 1 minute}', '2030-01-01 00:00:01.1Z');
SELECT results_eq($$SELECT slots[2] - slots[1], slot_hits, hits FROM mailroom.rate_limits WHERE key = 'mailroom/sender/t/s'$$,
  $$VALUES (55::bigint, '{5, 5}'::integer[], 5)$$,
  'recording adds a slot for p_now (1.1 s = 55 slots later), keeps the earlier one, counts what is in the window');
SELECT is(mailroom._send_rate_available('mailroom/sender/t', 5, 12, '2030-01-01 00:00:02.2Z'), 2, 'the per-minute budget (12) caps it next');
SELECT is(mailroom._send_rate_available('mailroom/sender/t', NULL, NULL, '2030-01-01 00:00:02.2Z'), NULL, 'no limits: NULL (unlimited)');
SELECT is((SELECT slot_hits FROM mailroom.rate_limits WHERE key = 'mailroom/sender/t/m'), ARRAY[10],
  'minute slots are 1.2 s long: both records share one');

-- Domain budgets: one row per domain with both windows, locked, judged and
-- spent in one statement (_domain_budgets_spend).
DELETE FROM mailroom.domain_budgets;
SELECT function_privs_are('mailroom', '_domain_budgets_spend', ARRAY['text[]', 'integer[]', 'integer[]', 'timestamp with time zone', 'integer'], 'mailroom_runner', ARRAY[]::text[], '_domain_budgets_spend is internal');
SELECT results_eq($$SELECT domain COLLATE "default", granted FROM mailroom._domain_budgets_spend('{a.test, a.test, a.test, b.test, free.test}', '{2, 2, 2, 9, NULL}', '{5, 5, 5, NULL, NULL}', '2030-01-01 00:00:00Z') ORDER BY 1$$,
  $$VALUES ('a.test'::text, 2), ('b.test', 1)$$,
  'a fresh domain grants what its tighter window allows; a domain without limits gets no row');
SELECT results_eq($$SELECT mailroom._window_hits(second_counts), mailroom._window_hits(minute_counts), per_second, per_minute FROM mailroom.domain_budgets WHERE domain = 'a.test'$$,
  $$VALUES ('{2}'::integer[], '{2}'::integer[], 2, 5)$$, 'both windows in the one row');
SELECT is((SELECT granted FROM mailroom._domain_budgets_spend('{a.test}', '{2}', '{5}', '2030-01-01 00:00:00.5Z')), 0,
  'within the second: nothing more');
SELECT is((SELECT granted FROM mailroom._domain_budgets_spend('{a.test, a.test, a.test}', '{2, 2, 2}', '{5, 5, 5}', '2030-01-01 00:00:01.1Z')), 2,
  'a second later the per-second window is free again');
SELECT is((SELECT granted FROM mailroom._domain_budgets_spend('{a.test, a.test}', '{2, 2}', '{5, 5}', '2030-01-01 00:00:02.2Z')), 1,
  'then the per-minute window (5) caps it');
SELECT is((SELECT granted FROM mailroom._domain_budgets_spend('{a.test}', '{2}', '{5}', '2030-01-01 00:00:02.2Z', -1)), -1,
  'a give-back (the gate refused a pick) is not judged');
SELECT results_eq($$SELECT second_slots, mailroom._window_hits(second_counts), mailroom._window_hits(minute_counts) FROM mailroom.domain_budgets WHERE domain = 'a.test'$$,
  $$VALUES (ARRAY[mailroom._rate_slot('2030-01-01 00:00:01.1Z', '1 second'), mailroom._rate_slot('2030-01-01 00:00:02.2Z', '1 second')],
            '{2, 0}'::integer[], '{4, 0}'::integer[])$$,
  'a slot per grant, slots older than two windows dropped (the one at 0 s), a give-back counted back');
-- A claim whose clock is behind the newest slot (it began before another
-- claim spent) is judged at its own clock and records in that newest slot:
-- its sends leave the window no earlier than they could.
SELECT is((SELECT granted FROM mailroom._domain_budgets_spend('{a.test}', '{2}', '{10}', '2030-01-01 00:00:02.3Z')), 1,
  'a later claim spends one');
SELECT is((SELECT granted FROM mailroom._domain_budgets_spend('{a.test, a.test}', '{2, 2}', '{10, 10}', '2030-01-01 00:00:02.25Z')), 1,
  'a claim behind it gets what is left at its own clock');
SELECT results_eq($$SELECT mailroom._window_hits(second_counts), mailroom._window_hits(minute_counts) FROM mailroom.domain_budgets WHERE domain = 'a.test'$$,
  $$VALUES ('{2, 0, 2}'::integer[], '{4, 2}'::integer[])$$,
  'and records in the newest slot');

SELECT * FROM finish();
ROLLBACK;
