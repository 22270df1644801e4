-- pgTAP: the send-rate helpers claim_batch uses
BEGIN;
SELECT plan(9);

SELECT function_privs_are('mailroom', '_send_rate_available', ARRAY['text', 'integer', 'integer', 'timestamp with time zone'], 'mailroom_runner', ARRAY[]::text[], '_send_rate_available is internal');
SELECT function_privs_are('mailroom', '_send_rate_take', ARRAY['text', 'integer', 'integer', 'integer', 'timestamp with time zone'], 'mailroom_runner', ARRAY[]::text[], '_send_rate_take is internal');
SELECT is_definer('mailroom', '_send_rate_take', ARRAY['text', 'integer', 'integer', 'integer', 'timestamp with time zone'], '_send_rate_take is SECURITY DEFINER');

DELETE FROM mailroom.rate_limits;
SELECT is(mailroom._send_rate_available('mailroom/sender/t', 5, 12, '2030-01-01 00:00:00Z'), 5, 'a fresh sender has its per-second budget');
SELECT mailroom._send_rate_take('mailroom/sender/t', 5, 5, 12, '2030-01-01 00:00:00Z');
SELECT is(mailroom._send_rate_available('mailroom/sender/t', 5, 12, '2030-01-01 00:00:00.5Z'), 0, 'spent within the second');
SELECT is(mailroom._send_rate_available('mailroom/sender/t', 5, 12, '2030-01-01 00:00:01.1Z'), 5, 'free again a window later');
SELECT mailroom._send_rate_take('mailroom/sender/t', 5, 5, 12, '2030-01-01 00:00:01.1Z');
SELECT is(mailroom._send_rate_available('mailroom/sender/t', 5, 12, '2030-01-01 00:00:02.2Z'), 2, 'the per-minute budget (12) caps it next');
SELECT is(mailroom._send_rate_available('mailroom/sender/t', NULL, NULL, '2030-01-01 00:00:02.2Z'), NULL, 'no limits: NULL (unlimited)');
SELECT is((SELECT slot_hits FROM mailroom.rate_limits WHERE key = 'mailroom/sender/t/m'), ARRAY[10],
  'minute slots are 1.2 s long: both takes share one');

SELECT * FROM finish();
ROLLBACK;
