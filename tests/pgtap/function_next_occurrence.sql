-- pgTAP: mailroom.next_occurrence — cron rules in local time across DST.
-- Every expected instant is written out literally (UTC).
BEGIN;
SELECT plan(78);
SET LOCAL timezone = 'UTC';

-- n consecutive occurrences after p_after
CREATE FUNCTION pg_temp.chain(p_rule text, p_zone text, p_after timestamptz, p_n int)
RETURNS timestamptz[] LANGUAGE plpgsql AS $$
DECLARE v_out timestamptz[] := '{}'; v_t timestamptz := p_after;
BEGIN
  FOR i IN 1 .. p_n LOOP
    v_t := mailroom.next_occurrence(p_rule, p_zone, v_t);
    v_out := v_out || v_t;
  END LOOP;
  RETURN v_out;
END $$;

-- the HINT of the error a statement raises
CREATE FUNCTION pg_temp.hint_of(p_sql text) RETURNS text LANGUAGE plpgsql AS $$
DECLARE v_hint text;
BEGIN
  EXECUTE p_sql;
  RETURN NULL;
EXCEPTION WHEN OTHERS THEN
  GET STACKED DIAGNOSTICS v_hint = PG_EXCEPTION_HINT;
  RETURN v_hint;
END $$;

-- contract
SELECT has_function('mailroom', 'next_occurrence', ARRAY['text', 'text', 'timestamp with time zone'], 'next_occurrence(rule, zone, after) exists');
SELECT is_definer('mailroom', 'next_occurrence', ARRAY['text', 'text', 'timestamp with time zone'], 'next_occurrence is SECURITY DEFINER');
SELECT function_privs_are('mailroom', 'next_occurrence', ARRAY['text', 'text', 'timestamp with time zone'], 'mailroom_app', ARRAY['EXECUTE'], 'mailroom_app may call next_occurrence');
SELECT function_privs_are('mailroom', 'next_occurrence', ARRAY['text', 'text', 'timestamp with time zone'], 'public', ARRAY[]::text[], 'PUBLIC may not call next_occurrence');
SELECT function_privs_are('mailroom', '_local_to_instant', ARRAY['timestamp without time zone', 'text'], 'mailroom_app', ARRAY[]::text[], 'the internal helpers are not granted');

-- Europe/Berlin: 2026-03-29 02:00 CET -> 03:00 CEST; 2026-10-25 03:00 CEST -> 02:00 CET
SELECT is(pg_temp.chain('30 2 * * *', 'Europe/Berlin', '2026-03-28 12:00Z', 2),
          ARRAY['2026-03-29 01:00Z', '2026-03-30 00:30Z']::timestamptz[],
          'Berlin 2026 gap: 02:30 does not exist, runs at 03:00 CEST, next day 02:30 CEST');
SELECT is(pg_temp.chain('30 2 * * *', 'Europe/Berlin', '2026-10-24 12:00Z', 2),
          ARRAY['2026-10-25 00:30Z', '2026-10-26 01:30Z']::timestamptz[],
          'Berlin 2026 overlap: 02:30 runs once (CEST), next day 02:30 CET');
SELECT is(pg_temp.chain('30 2 * * *', 'Europe/Berlin', '2027-03-27 12:00Z', 2),
          ARRAY['2027-03-28 01:00Z', '2027-03-29 00:30Z']::timestamptz[],
          'Berlin 2027 gap');
SELECT is(pg_temp.chain('30 2 * * *', 'Europe/Berlin', '2027-10-30 12:00Z', 2),
          ARRAY['2027-10-31 00:30Z', '2027-11-01 01:30Z']::timestamptz[],
          'Berlin 2027 overlap');
SELECT is(pg_temp.chain('*/15 * * * *', 'Europe/Berlin', '2026-03-29 00:40Z', 3),
          ARRAY['2026-03-29 00:45Z', '2026-03-29 01:00Z', '2026-03-29 01:15Z']::timestamptz[],
          'Berlin gap: the four quarter hours of 02:xx collapse into one run at 03:00 CEST');
SELECT is(pg_temp.chain('*/15 * * * *', 'Europe/Berlin', '2026-10-25 00:40Z', 3),
          ARRAY['2026-10-25 00:45Z', '2026-10-25 02:00Z', '2026-10-25 02:15Z']::timestamptz[],
          'Berlin overlap: the repeated 02:xx quarter hours run once each');

-- America/New_York: 2026-03-08 02:00 EST -> 03:00 EDT; 2026-11-01 02:00 EDT -> 01:00 EST
SELECT is(pg_temp.chain('30 2 * * *', 'America/New_York', '2026-03-07 12:00Z', 2),
          ARRAY['2026-03-08 07:00Z', '2026-03-09 06:30Z']::timestamptz[],
          'New York 2026 gap: 02:30 runs at 03:00 EDT');
SELECT is(pg_temp.chain('30 1 * * *', 'America/New_York', '2026-10-31 12:00Z', 2),
          ARRAY['2026-11-01 05:30Z', '2026-11-02 06:30Z']::timestamptz[],
          'New York 2026 overlap: 01:30 runs once (EDT)');
SELECT is(pg_temp.chain('30 2 * * *', 'America/New_York', '2027-03-13 12:00Z', 2),
          ARRAY['2027-03-14 07:00Z', '2027-03-15 06:30Z']::timestamptz[],
          'New York 2027 gap');
SELECT is(pg_temp.chain('30 1 * * *', 'America/New_York', '2027-11-06 12:00Z', 2),
          ARRAY['2027-11-07 05:30Z', '2027-11-08 06:30Z']::timestamptz[],
          'New York 2027 overlap');

-- Australia/Sydney: 2026-04-05 03:00 AEDT -> 02:00 AEST; 2026-10-04 02:00 AEST -> 03:00 AEDT
SELECT is(pg_temp.chain('30 2 * * *', 'Australia/Sydney', '2026-04-04 00:00Z', 2),
          ARRAY['2026-04-04 15:30Z', '2026-04-05 16:30Z']::timestamptz[],
          'Sydney 2026 overlap: 02:30 runs once (AEDT)');
SELECT is(pg_temp.chain('30 2 * * *', 'Australia/Sydney', '2026-10-03 00:00Z', 2),
          ARRAY['2026-10-03 16:00Z', '2026-10-04 15:30Z']::timestamptz[],
          'Sydney 2026 gap: 02:30 runs at 03:00 AEDT');
SELECT is(pg_temp.chain('30 2 * * *', 'Australia/Sydney', '2027-04-03 00:00Z', 2),
          ARRAY['2027-04-03 15:30Z', '2027-04-04 16:30Z']::timestamptz[],
          'Sydney 2027 overlap');
SELECT is(pg_temp.chain('30 2 * * *', 'Australia/Sydney', '2027-10-02 00:00Z', 2),
          ARRAY['2027-10-02 16:00Z', '2027-10-03 15:30Z']::timestamptz[],
          'Sydney 2027 gap');

-- Asia/Kolkata (+05:30, no DST) and UTC on the same days
SELECT is(pg_temp.chain('30 2 * * *', 'Asia/Kolkata', '2026-03-28 12:00Z', 2),
          ARRAY['2026-03-28 21:00Z', '2026-03-29 21:00Z']::timestamptz[],
          'Kolkata 2026: 02:30 IST every day, half-hour offset');
SELECT is(pg_temp.chain('30 2 * * *', 'Asia/Kolkata', '2027-10-30 12:00Z', 2),
          ARRAY['2027-10-30 21:00Z', '2027-10-31 21:00Z']::timestamptz[],
          'Kolkata 2027');
SELECT is(pg_temp.chain('30 2 * * *', 'UTC', '2026-03-28 12:00Z', 2),
          ARRAY['2026-03-29 02:30Z', '2026-03-30 02:30Z']::timestamptz[],
          'UTC 2026');
SELECT is(pg_temp.chain('30 2 * * *', 'UTC', '2027-10-30 12:00Z', 2),
          ARRAY['2027-10-31 02:30Z', '2027-11-01 02:30Z']::timestamptz[],
          'UTC 2027');

-- Weekly "Monday 08:00 local" across every change (never 7 x 24 hours)
SELECT is(pg_temp.chain('0 8 * * 1', 'Europe/Berlin', '2026-03-20Z', 2),
          ARRAY['2026-03-23 07:00Z', '2026-03-30 06:00Z']::timestamptz[], 'Berlin Monday 08:00 across spring 2026 (167 h apart)');
SELECT is(pg_temp.chain('0 8 * * 1', 'Europe/Berlin', '2026-10-15Z', 2),
          ARRAY['2026-10-19 06:00Z', '2026-10-26 07:00Z']::timestamptz[], 'Berlin Monday 08:00 across autumn 2026 (169 h apart)');
SELECT is(pg_temp.chain('0 8 * * 1', 'Europe/Berlin', '2027-03-20Z', 2),
          ARRAY['2027-03-22 07:00Z', '2027-03-29 06:00Z']::timestamptz[], 'Berlin Monday 08:00 across spring 2027');
SELECT is(pg_temp.chain('0 8 * * 1', 'Europe/Berlin', '2027-10-22Z', 2),
          ARRAY['2027-10-25 06:00Z', '2027-11-01 07:00Z']::timestamptz[], 'Berlin Monday 08:00 across autumn 2027');
SELECT is(pg_temp.chain('0 8 * * 1', 'America/New_York', '2026-03-01Z', 2),
          ARRAY['2026-03-02 13:00Z', '2026-03-09 12:00Z']::timestamptz[], 'New York Monday 08:00 across spring 2026');
SELECT is(pg_temp.chain('0 8 * * 1', 'America/New_York', '2026-10-24Z', 2),
          ARRAY['2026-10-26 12:00Z', '2026-11-02 13:00Z']::timestamptz[], 'New York Monday 08:00 across autumn 2026');
SELECT is(pg_temp.chain('0 8 * * 1', 'America/New_York', '2027-03-06Z', 2),
          ARRAY['2027-03-08 13:00Z', '2027-03-15 12:00Z']::timestamptz[], 'New York Monday 08:00 across spring 2027');
SELECT is(pg_temp.chain('0 8 * * 1', 'America/New_York', '2027-10-30Z', 2),
          ARRAY['2027-11-01 12:00Z', '2027-11-08 13:00Z']::timestamptz[], 'New York Monday 08:00 across autumn 2027');
SELECT is(pg_temp.chain('0 8 * * 1', 'Australia/Sydney', '2026-03-27Z', 2),
          ARRAY['2026-03-29 21:00Z', '2026-04-05 22:00Z']::timestamptz[], 'Sydney Monday 08:00 across April 2026');
SELECT is(pg_temp.chain('0 8 * * 1', 'Australia/Sydney', '2026-09-25Z', 2),
          ARRAY['2026-09-27 22:00Z', '2026-10-04 21:00Z']::timestamptz[], 'Sydney Monday 08:00 across October 2026');
SELECT is(pg_temp.chain('0 8 * * 1', 'Australia/Sydney', '2027-03-26Z', 2),
          ARRAY['2027-03-28 21:00Z', '2027-04-04 22:00Z']::timestamptz[], 'Sydney Monday 08:00 across April 2027');
SELECT is(pg_temp.chain('0 8 * * 1', 'Australia/Sydney', '2027-09-24Z', 2),
          ARRAY['2027-09-26 22:00Z', '2027-10-03 21:00Z']::timestamptz[], 'Sydney Monday 08:00 across October 2027');
SELECT is(pg_temp.chain('0 8 * * 1', 'Asia/Kolkata', '2026-03-20Z', 2),
          ARRAY['2026-03-23 02:30Z', '2026-03-30 02:30Z']::timestamptz[], 'Kolkata Monday 08:00');
SELECT is(pg_temp.chain('0 8 * * 1', 'UTC', '2027-10-22Z', 2),
          ARRAY['2027-10-25 08:00Z', '2027-11-01 08:00Z']::timestamptz[], 'UTC Monday 08:00');
-- ... and every week of 2026-2027 is Monday 08:00 local, one local week apart
SELECT is((SELECT count(*)::int FROM unnest(pg_temp.chain('0 8 * * 1', z, '2026-01-01Z', 104)) WITH ORDINALITY AS c(t, n)
           WHERE (t AT TIME ZONE z)::time = '08:00' AND extract(isodow FROM t AT TIME ZONE z) = 1
             AND (t AT TIME ZONE z)::date = date '2026-01-05' + (n::int - 1) * 7),
          104, format('%s: 104 weekly runs in 2026-2027 all on Monday 08:00 local', z))
FROM unnest(ARRAY['Europe/Berlin', 'America/New_York', 'Australia/Sydney', 'Asia/Kolkata', 'UTC']) AS z;

-- beyond the five zones: a 30-minute shift (Lord Howe) and a change at midnight (Santiago)
SELECT is(pg_temp.chain('15 2 * * *', 'Australia/Lord_Howe', '2026-10-03 00:00Z', 2),
          ARRAY['2026-10-03 15:30Z', '2026-10-04 15:15Z']::timestamptz[], 'Lord Howe: 02:15 falls in the 30-minute gap, runs at 02:30');
SELECT is(pg_temp.chain('45 1 * * *', 'Australia/Lord_Howe', '2026-04-04 00:00Z', 2),
          ARRAY['2026-04-04 14:45Z', '2026-04-05 15:15Z']::timestamptz[], 'Lord Howe: 01:45 in the 30-minute overlap runs once');
SELECT is(pg_temp.chain('30 0 * * *', 'America/Santiago', '2026-09-05 12:00Z', 2),
          ARRAY['2026-09-06 04:00Z', '2026-09-07 03:30Z']::timestamptz[], 'Santiago: 00:30 on the day midnight does not exist runs at 01:00');
SELECT is(pg_temp.chain('30 23 * * *', 'America/Santiago', '2026-04-04 12:00Z', 2),
          ARRAY['2026-04-05 02:30Z', '2026-04-06 03:30Z']::timestamptz[], 'Santiago: 23:30 in the repeated hour runs once');

-- the cron language: lists, ranges, steps, names, day-of-month OR day-of-week, macros
SELECT is(pg_temp.chain('0,30 9-17/4 * * MON-fri', 'UTC', '2026-01-02 16:00Z', 5),
          ARRAY['2026-01-02 17:00Z', '2026-01-02 17:30Z', '2026-01-05 09:00Z', '2026-01-05 09:30Z', '2026-01-05 13:00Z']::timestamptz[],
          'lists, stepped ranges and weekday names');
SELECT is(pg_temp.chain('10-40/15 8 * * *', 'UTC', '2026-01-01Z', 4),
          ARRAY['2026-01-01 08:10Z', '2026-01-01 08:25Z', '2026-01-01 08:40Z', '2026-01-02 08:10Z']::timestamptz[],
          'a stepped minute range');
SELECT is(pg_temp.chain('5/20 0 1 jan,Jul *', 'UTC', '2026-01-01Z', 4),
          ARRAY['2026-01-01 00:05Z', '2026-01-01 00:25Z', '2026-01-01 00:45Z', '2026-07-01 00:05Z']::timestamptz[],
          'N/step means N-max/step; month names');
SELECT is(pg_temp.chain('0 12 13 * 5', 'UTC', '2026-01-01Z', 4),
          ARRAY['2026-01-02 12:00Z', '2026-01-09 12:00Z', '2026-01-13 12:00Z', '2026-01-16 12:00Z']::timestamptz[],
          'both day fields restricted: the 13th OR a Friday');
SELECT is(pg_temp.chain('0 12 */2 * 5', 'UTC', '2026-01-01Z', 2),
          ARRAY['2026-01-09 12:00Z', '2026-01-23 12:00Z']::timestamptz[],
          'day-of-month starting with *: odd days AND Fridays (Vixie cron)');
SELECT is(pg_temp.chain('0 0 * * 7', 'UTC', '2026-01-01Z', 1), ARRAY['2026-01-04 00:00Z']::timestamptz[], 'weekday 7 is Sunday');
SELECT is(pg_temp.chain('@weekly', 'Europe/Berlin', '2026-01-01Z', 1), ARRAY['2026-01-03 23:00Z']::timestamptz[], '@weekly = Sunday midnight local');
SELECT is(mailroom.next_occurrence('0 0 29 2 *', 'UTC', '2026-01-01Z'), '2028-02-29 00:00Z'::timestamptz, '29 February: the next leap year');
SELECT is(mailroom.next_occurrence('0 8 * * 1', 'Europe/Berlin', '2026-03-23 07:00Z'), '2026-03-30 06:00Z'::timestamptz, 'strictly after: an occurrence equal to after is skipped');
SELECT is(mailroom.next_occurrence(' 0  8 * *  1 ', 'Europe/Berlin', '2026-03-23 07:00:30Z'), '2026-03-30 06:00Z'::timestamptz, 'extra blanks are fine; seconds of after are respected');

-- bad input: SQLSTATE 22023 and a message naming the field
SELECT throws_ok($$SELECT mailroom.next_occurrence('0 8 * * 1', 'Mars/Olympus_Mons', now())$$, '22023',
  'mailroom: zone: "Mars/Olympus_Mons" is not a known IANA time zone', 'unknown zone');
SELECT throws_ok($$SELECT mailroom.next_occurrence('0 8 * * 1', 'CEST', now())$$, '22023',
  'mailroom: zone: "CEST" is not a known IANA time zone', 'an abbreviation is not a zone');
SELECT throws_ok($$SELECT mailroom.next_occurrence('0 8 * * 1', NULL, now())$$, '22023',
  'mailroom: zone: must be an IANA time zone name, got nothing', 'missing zone');
SELECT throws_ok($$SELECT mailroom.next_occurrence('0 8 * *', 'UTC', now())$$, '22023',
  'mailroom: rule: expected 5 fields (minute hour day-of-month month day-of-week), got 4 in "0 8 * *"', 'four fields');
SELECT throws_ok($$SELECT mailroom.next_occurrence('', 'UTC', now())$$, '22023',
  'mailroom: rule: must be a 5-field cron expression, got nothing', 'empty rule');
SELECT throws_ok($$SELECT mailroom.next_occurrence('60 8 * * 1', 'UTC', now())$$, '22023',
  'mailroom: rule: minute: 60 is out of range 0-59', 'minute out of range');
SELECT throws_ok($$SELECT mailroom.next_occurrence('0 24 * * 1', 'UTC', now())$$, '22023',
  'mailroom: rule: hour: 24 is out of range 0-23', 'hour out of range');
SELECT throws_ok($$SELECT mailroom.next_occurrence('0 8 0 * *', 'UTC', now())$$, '22023',
  'mailroom: rule: day-of-month: 0 is out of range 1-31', 'day-of-month out of range');
SELECT throws_ok($$SELECT mailroom.next_occurrence('0 8 * 13 *', 'UTC', now())$$, '22023',
  'mailroom: rule: month: 13 is out of range 1-12', 'month out of range');
SELECT throws_ok($$SELECT mailroom.next_occurrence('0 8 * * 8', 'UTC', now())$$, '22023',
  'mailroom: rule: day-of-week: 8 is out of range 0-7', 'day-of-week out of range');
SELECT throws_ok($$SELECT mailroom.next_occurrence('0 8 * * MOO', 'UTC', now())$$, '22023',
  'mailroom: rule: day-of-week: "moo" is neither a number nor a name (SUN,MON,TUE,WED,THU,FRI,SAT)', 'unknown weekday name');
SELECT throws_ok($$SELECT mailroom.next_occurrence('x 8 * * 1', 'UTC', now())$$, '22023',
  'mailroom: rule: minute: "x" is not a number', 'garbage minute');
SELECT throws_ok($$SELECT mailroom.next_occurrence('0 17-9 * * *', 'UTC', now())$$, '22023',
  'mailroom: rule: hour: range "17-9" runs backwards', 'backwards range');
SELECT throws_ok($$SELECT mailroom.next_occurrence('*/0 8 * * *', 'UTC', now())$$, '22023',
  'mailroom: rule: minute: step "0" must be a positive integer', 'zero step');
SELECT throws_ok($$SELECT mailroom.next_occurrence('0,,5 8 * * *', 'UTC', now())$$, '22023',
  'mailroom: rule: minute: empty item in list "0,,5"', 'empty list item');
SELECT throws_ok($$SELECT mailroom.next_occurrence('0 0 30 2 *', 'UTC', now())$$, '22023',
  'mailroom: rule: day-of-month "30" never occurs in month "2"', 'a rule that never fires');
SELECT throws_ok($$SELECT mailroom.next_occurrence('@reboot', 'UTC', now())$$, '22023',
  'mailroom: rule: unknown macro "@reboot"', 'unknown macro');

-- hostile input (rework after v0.1.0)
SELECT throws_ok($$SELECT mailroom.next_occurrence('0 8 * * *', 'UTC', 'infinity')$$, '22023',
  'mailroom: after: must be an instant from 1900 to 8999, got infinity', 'an infinite instant is refused, not answered with NULL');
SELECT throws_ok($$SELECT mailroom.next_occurrence('0 8 * * *', 'UTC', '294276-12-31 00:00Z')$$, '22023',
  'mailroom: after: must be an instant from 1900 to 8999, got 294276-12-31 00:00:00+00', 'a far-off instant is refused, not 22008');
SELECT throws_ok($$SELECT mailroom.next_occurrence(repeat('0,', 600) || '0 * * * *', 'UTC', now())$$, '22023',
  'mailroom: rule: longer than 1000 characters (1209)', 'an over-long rule');
SELECT throws_ok($$SELECT mailroom._zone_check('Mars/Olympus')$$, '22023',
  'mailroom: zone: "Mars/Olympus" is not a known IANA time zone', 'unknown zone');
SELECT is((SELECT pg_temp.hint_of($$SELECT mailroom._zone_check('Mars/Olympus')$$)),
  'use a name from pg_timezone_names such as Europe/Berlin', 'no case-insensitive match: a real example as hint, not ""');

SELECT * FROM finish();
ROLLBACK;
