-- pgTAP: the send-rate helpers claim_batch uses
BEGIN;
SELECT plan(10);

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

SELECT * FROM finish();
ROLLBACK;
