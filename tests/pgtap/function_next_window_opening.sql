-- pgTAP: mailroom.next_window_opening — recipient-local send windows.
BEGIN;
SELECT plan(16);
SET LOCAL timezone = 'UTC';

SELECT has_function('mailroom', 'next_window_opening', ARRAY['text', 'time without time zone', 'time without time zone', 'timestamp with time zone'], 'next_window_opening exists');
SELECT is_definer('mailroom', 'next_window_opening', ARRAY['text', 'time without time zone', 'time without time zone', 'timestamp with time zone'], 'it is SECURITY DEFINER');
SELECT function_privs_are('mailroom', 'next_window_opening', ARRAY['text', 'time without time zone', 'time without time zone', 'timestamp with time zone'], 'mailroom_app', ARRAY['EXECUTE'], 'mailroom_app may call it');
SELECT function_privs_are('mailroom', '_window_open', ARRAY['text', 'time without time zone', 'time without time zone', 'timestamp with time zone'], 'mailroom_app', ARRAY[]::text[], '_window_open is internal');

SELECT is(mailroom.next_window_opening('Europe/Berlin', '08:00', '20:00', '2026-07-01 12:00Z'), '2026-07-01 12:00Z'::timestamptz, 'inside the window: now');
SELECT is(mailroom.next_window_opening('Europe/Berlin', '08:00', '20:00', '2026-07-01 18:30Z'), '2026-07-02 06:00Z'::timestamptz, 'after closing: next morning 08:00 local');
SELECT is(mailroom.next_window_opening('Europe/Berlin', '08:00', '20:00', '2026-07-01 04:00Z'), '2026-07-01 06:00Z'::timestamptz, 'before opening: 08:00 local today');
SELECT is(mailroom.next_window_opening('America/New_York', '22:00', '06:00', '2026-07-01 12:00Z'), '2026-07-02 02:00Z'::timestamptz, 'a window across midnight opens at 22:00 local');
SELECT is(mailroom.next_window_opening('America/New_York', '22:00', '06:00', '2026-07-02 05:00Z'), '2026-07-02 05:00Z'::timestamptz, 'and is open at 01:00 local');
SELECT is(mailroom.next_window_opening('Europe/Berlin', '02:30', '05:00', '2026-03-28 23:00Z'), '2026-03-29 01:00Z'::timestamptz, 'an opening inside the DST gap opens after the gap');


SELECT is(mailroom.next_window_opening('Australia/Sydney', '08:00', '20:00', '2026-04-04 22:30Z'), '2026-04-04 22:30Z'::timestamptz, 'Sydney 09:30 AEST on the fall-back day: open');
SELECT is(mailroom.next_window_opening('Asia/Kolkata', '08:00', '20:00', '2026-07-01 15:00Z'), '2026-07-02 02:30Z'::timestamptz, 'Kolkata 20:30: opens 08:00 IST next day');
SELECT is(mailroom.next_window_opening('UTC', NULL, NULL, '2026-07-01 03:00Z'), '2026-07-01 03:00Z'::timestamptz, 'no window: any hour');

-- bad input
SELECT throws_ok($$SELECT mailroom.next_window_opening('UTC', '08:00', '08:00', now())$$, '22023',
  'mailroom: window_end: must differ from window_start (08:00:00), an empty window never opens', 'empty window');
SELECT throws_ok($$SELECT mailroom.next_window_opening('UTC', '08:00', NULL, now())$$, '22023',
  'mailroom: window_end: must be given together with window_start', 'half a window');
SELECT throws_ok($$SELECT mailroom.next_window_opening('Moon/Base', '08:00', '20:00', now())$$, '22023',
  'mailroom: zone: "Moon/Base" is not a known IANA time zone', 'unknown zone');

SELECT * FROM finish();
ROLLBACK;
